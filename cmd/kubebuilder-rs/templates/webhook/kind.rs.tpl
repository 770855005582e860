//! The {{kind}} admission webhooks ({{api_version}}): what the API server asks before it
//! stores a {{kind}}. `kubebuilder-rs create webhook` adds each kind of webhook above the
//! marker at the end of this file; `src/webhook/mod.rs` serves them.

use controller_runtime::runtime::webhook::{self, WebhookServer};

use crate::api::{{version}}::{{kind}};

{{fragments}}// +kubebuilder:scaffold:webhook-kinds
