//! The `{{version}}` version of the project's kinds (`kubebuilder-rs create api` adds them
//! above the markers).

// +kubebuilder:scaffold:kinds

// +kubebuilder:scaffold:kind-exports
