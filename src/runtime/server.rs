//! The probe and metrics HTTP endpoints.
