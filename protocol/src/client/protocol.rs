//! [`Client`] as the [`ClientProtocol`] of the reference: the typed calls come from the method table
//! (`methods.rs`); this file supplies the three things they rest on (a call, following a session, closing) and
//! the delivery stream they feed.

use super::{Client, ClientDelivery, ClientError, Deliveries};
use crate::jsonrpc::Method;
use crate::methods::ClientProtocol;

/// An ordered stream of [`ClientDelivery`] values; it ends (`None`) when the connection is gone for good.
pub trait DeliveryStream: Send {
    fn next(&mut self) -> impl Future<Output = Option<ClientDelivery>> + Send;
}

impl DeliveryStream for Deliveries {
    fn next(&mut self) -> impl Future<Output = Option<ClientDelivery>> + Send {
        Deliveries::next(self)
    }
}

impl ClientProtocol for Client {
    type Deliveries = Deliveries;

    fn call<M: Method>(&self, params: M::Params) -> impl Future<Output = Result<M::Result, ClientError>> + Send {
        Client::call::<M>(self, params)
    }

    fn subscribe(
        &self,
        session_id: &str,
        cursor: Option<u64>,
    ) -> impl Future<Output = Result<u64, ClientError>> + Send {
        Client::subscribe(self, session_id, cursor)
    }

    fn close(&self) -> impl Future<Output = ()> + Send {
        Client::close(self)
    }
}
