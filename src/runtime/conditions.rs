//! Status conditions (`metav1.Condition`) set by Kubernetes' rules: apimachinery's
//! `meta.SetStatusCondition`, `FindStatusCondition`, `IsStatusConditionTrue` and the rest.
//!
//! A condition's `lastTransitionTime` says when its *status* last changed, so [`set`] moves
//! it only when the status changes; a new reason, message or observed generation alone
//! keeps it. That is what lets a reconciler recompute every condition on every pass and
//! still write nothing when nothing changed (see [`status::write`](super::status::write)).
//!
//! ```
//! use controller_runtime::runtime::conditions;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
//!
//! let mut list = Vec::new();
//! let generation = Some(4);
//! let ready = |ok: bool, reason: &str, message: &str| Condition {
//!     observed_generation: generation,
//!     ..conditions::new("Available", ok, reason, message)
//! };
//! assert!(conditions::set(&mut list, ready(false, "PodsNotReady", "0 of 3 ready")));
//! let since = list[0].last_transition_time.clone();
//! // The same status with a new message: changed, but the transition time stays.
//! assert!(conditions::set(&mut list, ready(false, "PodsNotReady", "2 of 3 ready")));
//! assert_eq!(list[0].last_transition_time, since);
//! // Nothing new: nothing changed.
//! assert!(!conditions::set(&mut list, ready(false, "PodsNotReady", "2 of 3 ready")));
//! assert!(conditions::is_false(&list, "Available"));
//! assert_eq!(conditions::find(&list, "Available").unwrap().message, "2 of 3 ready");
//! ```
//!
//! A status type holds its conditions as `Vec<Condition>`; give the field
//! [`crd::conditions_schema`](super::crd::conditions_schema) so the API server validates
//! them as controller-gen's schema does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// `True`: the condition holds.
pub const TRUE: &str = "True";
/// `False`: the condition does not hold.
pub const FALSE: &str = "False";
/// `Unknown`: the controller cannot tell.
pub const UNKNOWN: &str = "Unknown";

/// A condition of type `type_`, `True` or `False`, with its reason (UpperCamelCase) and a
/// message for people; no observed generation, and a transition time left for [`set`] to
/// fill in (the Unix epoch, which [`set`] reads as unset).
///
/// Use struct update syntax for the rest: `Condition { observed_generation, ..new(..) }`,
/// or `status: UNKNOWN.into()`.
///
/// ```
/// use controller_runtime::runtime::conditions;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
///
/// let ready = Condition {
///     observed_generation: Some(2),
///     ..conditions::new("Available", true, "PodsReady", "3 of 3 ready")
/// };
/// assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "PodsReady"));
/// ```
pub fn new(type_: &str, status: bool, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { TRUE } else { FALSE }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation: None,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// Sets `condition` in `conditions` (apimachinery's `meta.SetStatusCondition`), returning
/// whether anything changed:
///
/// - a type not there yet is appended;
/// - a type there already takes the new status, reason, message and observed generation,
///   and its `lastTransitionTime` moves only if the status changed.
///
/// The transition time written is `condition.last_transition_time` when that is set (after
/// the Unix epoch), or else now, to the second (the precision `metav1.Time` keeps).
///
/// ```
/// use controller_runtime::runtime::conditions;
///
/// let mut list = Vec::new();
/// assert!(conditions::set(&mut list, conditions::new("Ready", false, "Starting", "")));
/// let since = list[0].last_transition_time.clone();
/// assert!(conditions::set(&mut list, conditions::new("Ready", false, "Pulling", "")));
/// assert_eq!(list[0].last_transition_time, since); // the status stayed False
/// ```
pub fn set(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    set_at(conditions, condition, now())
}

/// [`set`], with `now` as the time.
fn set_at(conditions: &mut Vec<Condition>, mut condition: Condition, now: Timestamp) -> bool {
    let transition = if condition.last_transition_time.0 > Timestamp::UNIX_EPOCH {
        condition.last_transition_time.clone()
    } else {
        Time(now)
    };
    let Some(old) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        condition.last_transition_time = transition;
        conditions.push(condition);
        return true;
    };
    let mut changed = false;
    if old.status != condition.status {
        old.status = condition.status;
        old.last_transition_time = transition;
        changed = true;
    }
    for (old, new) in [
        (&mut old.reason, condition.reason),
        (&mut old.message, condition.message),
    ] {
        if *old != new {
            *old = new;
            changed = true;
        }
    }
    if old.observed_generation != condition.observed_generation {
        old.observed_generation = condition.observed_generation;
        changed = true;
    }
    changed
}

/// Removes the condition of type `type_`, returning whether there was one
/// (`meta.RemoveStatusCondition`).
///
/// ```
/// use controller_runtime::runtime::conditions;
///
/// let mut list = vec![conditions::new("Ready", true, "Up", "")];
/// assert!(conditions::remove(&mut list, "Ready"));
/// assert!(list.is_empty());
/// ```
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The condition of type `type_`, if there is one (`meta.FindStatusCondition`).
///
/// ```
/// use controller_runtime::runtime::conditions;
///
/// let list = vec![conditions::new("Ready", true, "Up", "serving")];
/// assert_eq!(conditions::find(&list, "Ready").map(|c| c.message.as_str()), Some("serving"));
/// assert!(conditions::find(&list, "Degraded").is_none());
/// ```
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition `type_` is there with status `True` (`meta.IsStatusConditionTrue`).
///
/// ```
/// use controller_runtime::runtime::conditions;
///
/// let list = vec![conditions::new("Ready", true, "Up", "")];
/// assert!(conditions::is_true(&list, "Ready"));
/// assert!(!conditions::is_true(&list, "Degraded"));
/// ```
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// Whether the condition `type_` is there with status `False`
/// (`meta.IsStatusConditionFalse`). A missing condition is neither true nor false.
///
/// ```
/// use controller_runtime::runtime::conditions;
///
/// let list = vec![conditions::new("Degraded", false, "Reconciled", "")];
/// assert!(conditions::is_false(&list, "Degraded"));
/// assert!(!conditions::is_false(&list, "Ready")); // missing: neither
/// ```
pub fn is_false(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == FALSE)
}

/// The time now, to the second.
fn now() -> Timestamp {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Timestamp::from_second(i64::try_from(seconds).unwrap_or(i64::MAX)).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn a_new_type_is_appended_with_the_time_given_or_now() {
        let mut list = Vec::new();
        assert!(set_at(&mut list, new("A", true, "Ok", "fine"), at(100)));
        assert_eq!(list[0].last_transition_time, Time(at(100)));
        let given = Condition {
            last_transition_time: Time(at(7)),
            ..new("B", false, "No", "")
        };
        assert!(set_at(&mut list, given, at(100)));
        assert_eq!(list[1].last_transition_time, Time(at(7)));
        assert_eq!(list.len(), 2);
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let mut list = Vec::new();
        set_at(
            &mut list,
            new("Available", false, "NotReady", "0 of 2"),
            at(10),
        );
        let more = Condition {
            observed_generation: Some(2),
            ..new("Available", false, "StillNotReady", "1 of 2")
        };
        assert!(set_at(&mut list, more, at(20)));
        assert_eq!(list[0].last_transition_time, Time(at(10)));
        assert_eq!(
            (list[0].reason.as_str(), list[0].message.as_str()),
            ("StillNotReady", "1 of 2")
        );
        assert_eq!(list[0].observed_generation, Some(2));
        assert!(set_at(
            &mut list,
            new("Available", true, "Ready", "2 of 2"),
            at(30)
        ));
        assert_eq!(list[0].last_transition_time, Time(at(30)));
        assert_eq!(list[0].observed_generation, None);
    }

    #[test]
    fn setting_the_same_condition_again_changes_nothing() {
        let mut list = Vec::new();
        set_at(&mut list, new("A", true, "Ok", "fine"), at(10));
        let before = list.clone();
        assert!(!set_at(&mut list, new("A", true, "Ok", "fine"), at(20)));
        assert_eq!(list, before);
    }

    #[test]
    fn set_uses_the_clock_to_the_second() {
        let mut list = Vec::new();
        set(&mut list, new("A", true, "Ok", ""));
        let time = list[0].last_transition_time.0;
        assert!(time > Timestamp::UNIX_EPOCH);
        assert_eq!(time.subsec_nanosecond(), 0);
    }

    #[test]
    fn find_true_false_and_remove() {
        let mut list = Vec::new();
        set_at(&mut list, new("A", true, "Ok", ""), at(1));
        let unknown = Condition {
            status: UNKNOWN.into(),
            ..new("B", false, "Unsure", "")
        };
        set_at(&mut list, unknown, at(1));
        assert!(is_true(&list, "A") && !is_false(&list, "A"));
        assert!(!is_true(&list, "B") && !is_false(&list, "B"));
        assert!(!is_true(&list, "C") && !is_false(&list, "C"));
        assert_eq!(find(&list, "B").unwrap().reason, "Unsure");
        assert!(remove(&mut list, "A"));
        assert!(!remove(&mut list, "A"));
        assert_eq!(list.len(), 1);
    }
}
