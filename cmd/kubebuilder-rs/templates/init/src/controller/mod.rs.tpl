//! The controllers: a module per kind (`kubebuilder-rs create api` adds them above the
//! marker), and what they share.

// +kubebuilder:scaffold:controllers

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Sets the condition `type_` as apimachinery's `meta.SetStatusCondition` does: added if
/// missing, else updated, its `lastTransitionTime` moved only when its status changes.
/// Returns whether anything changed, so a reconcile writes the status only when it must.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) -> bool {
    let status = if status { "True" } else { "False" };
    let now = || {
        // metav1.Time keeps whole seconds.
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Time(Timestamp::from_second(seconds).unwrap_or_default())
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let same = c.status == status
                && c.reason == reason
                && c.message == message
                && c.observed_generation == observed_generation;
            if c.status != status {
                c.last_transition_time = now();
            }
            c.status = status.to_owned();
            c.reason = reason.to_owned();
            c.message = message.to_owned();
            c.observed_generation = observed_generation;
            !same
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: reason.to_owned(),
                message: message.to_owned(),
                observed_generation,
                last_transition_time: now(),
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn available(c: &mut Vec<Condition>, up: bool, generation: i64) -> bool {
        set_condition(c, "Available", up, "Why", "", Some(generation))
    }

    #[test]
    fn a_condition_changes_only_when_something_in_it_does() {
        let mut conditions = Vec::new();
        assert!(available(&mut conditions, true, 1));
        let first = conditions[0].last_transition_time.clone();
        assert!(!available(&mut conditions, true, 1));
        assert!(available(&mut conditions, true, 2));
        assert_eq!(conditions[0].last_transition_time, first, "still True");
        assert!(available(&mut conditions, false, 2));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].status, "False");
    }
}
