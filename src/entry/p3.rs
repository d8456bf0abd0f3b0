//! The WASIp3 build's entry point: Spin 4's `wasi:http/handler@0.3.0-rc` hands each request
//! to [`crate::serve`], counted in [`Serving`] while it lives.

use bytes::Bytes;
use futures::StreamExt;
use spin_sdk::http::body::IncomingBodyExt;
use spin_sdk::http::{FullBody, IntoResponse, Request};
use spin_sdk::http_service;
use spin_sdk::wasip3::http::types::{ErrorCode, Response};

use crate::http::{Head, Reply};
use crate::platform::Serving;

#[http_service]
async fn handle(request: Request) -> Result<Response, ErrorCode> {
    let _serving = Serving::start();
    let (parts, body) = request.into_parts();
    let head = Head {
        method: parts.method.to_string(),
        path_with_query: parts
            .uri
            .path_and_query()
            .map_or_else(String::new, |target| target.as_str().to_string()),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
            .collect(),
    };
    let body = body.stream().map(|chunk| chunk.map(|bytes| bytes.to_vec()));
    let served = crate::serve(head, body).await;
    // What follows the answer runs before it leaves: Spin 4.0 drops an instance once it
    // idles or has served its last request, and with it any task still running (a
    // publication cut off so is safe, a lost log line is not).
    served.after.await;
    response(served.reply)
}

fn response(reply: Reply) -> Result<Response, ErrorCode> {
    let mut response = ::http::Response::builder().status(reply.status);
    for (name, value) in reply.headers {
        response = response.header(name, value);
    }
    response
        .header("content-length", reply.body.len().to_string())
        .body(FullBody::new(Bytes::from(reply.body)))
        .map_err(|error| ErrorCode::InternalError(Some(error.to_string())))?
        .into_response()
}
