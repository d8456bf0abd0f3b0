//! The default build's entry point: Spin 2's `wasi:http@0.2.0` incoming handler hands each
//! request to [`crate::serve`].

use spin_sdk::http::{IncomingRequest, Response, ResponseOutparam};
use spin_sdk::http_component;

use crate::http::{Head, Reply};

#[http_component]
async fn handle(request: IncomingRequest, out: ResponseOutparam) {
    // The headers are a child resource of the request: they must be dropped before
    // `into_body_stream` consumes the request, or wasmtime's wasi-http host (Spin 3)
    // traps with "resource has children". `entries` copies them out.
    let head = Head {
        method: request.method().to_string(),
        path_with_query: request.path_with_query().unwrap_or_default(),
        headers: request.headers().entries(),
    };
    let served = crate::serve(head, request.into_body_stream()).await;
    seckill_answer::send(out, response(served.reply));
    served.after.await;
}

fn response(reply: Reply) -> Response {
    let mut response = Response::builder();
    response.status(reply.status);
    for (name, value) in reply.headers {
        response.header(name, value);
    }
    response.body(reply.body).build()
}
