//! PLACEHOLDER: the shared client.
