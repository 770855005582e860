//! The webhooks: a module per kind (`kubebuilder-rs create webhook` adds them above the
//! markers), all served by one [`server`]: the admission webhooks at their paths, and the
//! CRDs' conversions on `/convert`.

// +kubebuilder:scaffold:webhook-modules

use controller_runtime::runtime::conversion::Conversion;
use controller_runtime::runtime::webhook::{WebhookOptions, WebhookServer};

/// Each kind's admission webhooks, each adding its handlers to the server.
const WEBHOOKS: &[fn(WebhookServer) -> WebhookServer] = &[
    // +kubebuilder:scaffold:webhooks
];

/// Each kind's conversions between its versions, served by one conversion webhook.
const CONVERSIONS: &[fn(Conversion) -> Conversion] = &[
    // +kubebuilder:scaffold:conversions
];

/// The webhook server with every kind's webhooks, listening as `options` say.
pub fn server(options: WebhookOptions) -> WebhookServer {
    let conversion = CONVERSIONS
        .iter()
        .fold(Conversion::new(), |conversion, add| add(conversion));
    WEBHOOKS
        .iter()
        .fold(WebhookServer::new(options), |server, add| add(server))
        .conversion(conversion)
}
