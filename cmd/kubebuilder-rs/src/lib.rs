//! kubebuilder's workflow on this runtime: `init` writes a standalone Cargo project that runs
//! a manager on `controller-runtime`, `create api` adds a kind (its types, CRD, controller,
//! test, sample and RBAC), `create webhook` adds its admission webhooks.
//!
//! * [`commands`] — [`init`], [`create_api`] and [`create_webhook`]: each checks all of its
//!   input and the project's state, then plans every write before making one;
//! * [`plan`] — the [`Plan`](plan::Plan) of writes: files created once and never
//!   overwritten, insertions above `+kubebuilder:scaffold:` markers made once;
//! * [`names`] — domain, project name, group, version and kind, checked as Kubernetes and
//!   Cargo check them;
//! * [`project`] — the `PROJECT` file that records the domain and kinds;
//! * [`runtime`] — where the runtime comes from (this checkout by default) and the versions
//!   the project builds on;
//! * the templates under `templates/`, compiled in, with `{{name}}` placeholders.
//!
//! ```text
//!  flags ──▶ names::check_* ──▶ Project::read ──▶ Plan (create / insert / keep) ──▶ apply
//!                                                  │ templates + values
//!                                                  ▼
//!                              every file checked before the first is written
//! ```
//!
//! ```no_run
//! use kubebuilder_rs::{ApiOptions, InitOptions, RuntimeSource, create_api, init};
//!
//! # fn main() -> Result<(), kubebuilder_rs::Error> {
//! init(InitOptions {
//!     dir: "guestbook".into(),
//!     domain: "example.com".into(),
//!     project_name: None,
//!     runtime: RuntimeSource::built_from(),
//! })?;
//! create_api(ApiOptions {
//!     dir: "guestbook".into(),
//!     group: "webapp".into(),
//!     version: "v1".into(),
//!     kind: "Guestbook".into(),
//!     resource: true,
//!     controller: true,
//! })?;
//! # Ok(())
//! # }
//! ```

pub mod commands;
pub mod names;
pub mod plan;
pub mod project;
pub mod runtime;
mod templates;

pub use commands::{
    ApiOptions, Error, InitOptions, Summary, WebhookOptions, create_api, create_webhook, init,
};
pub use runtime::RuntimeSource;
