//! The admission webhooks: a module per kind (`kubebuilder-rs create webhook` adds them
//! above the markers), all served by one [`server`].

// +kubebuilder:scaffold:webhook-modules

use controller_runtime::runtime::webhook::{WebhookOptions, WebhookServer};

/// Each kind's webhooks, each adding its handlers to the server.
const WEBHOOKS: &[fn(WebhookServer) -> WebhookServer] = &[
    // +kubebuilder:scaffold:webhooks
];

/// The webhook server with every kind's webhooks, listening as `options` say.
pub fn server(options: WebhookOptions) -> WebhookServer {
    WEBHOOKS
        .iter()
        .fold(WebhookServer::new(options), |server, add| add(server))
}
