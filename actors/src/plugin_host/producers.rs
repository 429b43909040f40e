//! Producer messaging for plugins (`plugin/producer/*`). Until the engine's producers API exists, these answer
//! `not_implemented`; registrations would be dropped when the plugin exits.

use futures::future::BoxFuture;
use serde_json::Value;
use troupe_protocol::RpcError;

use super::host::PluginHost;

pub(super) fn handle(
    _host: &mut PluginHost,
    method: &str,
    _params: Value,
) -> BoxFuture<'static, Result<Value, RpcError>> {
    let error = RpcError::not_implemented(method);
    Box::pin(futures::future::ready(Err(error)))
}

/// The plugin's process is gone: its registrations go with it.
pub(super) fn plugin_exited(_host: &PluginHost) {}
