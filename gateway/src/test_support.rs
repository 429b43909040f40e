//! Helpers shared by the gateway's unit tests.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};

/// A header map from static `(name, value)` pairs; repeated names keep every value, as on the wire.
pub(crate) fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
    map
}
