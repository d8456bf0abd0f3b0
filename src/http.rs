//! The HTTP edge: reading a request (its head, then the body of a route that takes one,
//! with its limit and deadline) and writing JSON answers, on what each build's entry
//! point (`p1`, `p3`) hands over and sends.

use std::future::Future;
use std::time::Duration;

use futures::future::{select, Either, LocalBoxFuture};
use futures::{Stream, StreamExt};
use serde::Serialize;

use seckill_core::ApiError;

use crate::error::Failure;
use crate::platform::pause;

/// Bodies larger than this are refused with 413 before they are parsed.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// How long a route that takes a body waits for it, from its head: a body of at most
/// [`MAX_BODY_BYTES`] comes in far less, and a client that sends it slower holds an
/// instance no longer than this (a `408`).
pub const BODY_DEADLINE: Duration = Duration::from_secs(5);

/// A request's method, target and headers, as the host handed them over, before its body.
#[derive(Debug, Default)]
pub struct Head {
    pub method: String,
    pub path_with_query: String,
    /// Names in lower case, as both of Spin's HTTP interfaces give them.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    /// Every value of the header `name` (lower case).
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_slice())
    }

    /// The header's value as text, if given: given twice or not UTF-8, a `400`.
    pub fn header(&self, name: &str) -> Result<Option<String>, ApiError> {
        let mut values = self.values(name);
        match (values.next(), values.next()) {
            (None, _) => Ok(None),
            (Some(value), None) => String::from_utf8(value.to_vec())
                .map(Some)
                .map_err(|_| ApiError::BadRequest(format!("the {name} header is not UTF-8"))),
            _ => Err(ApiError::BadRequest(format!("more than one {name} header"))),
        }
    }

    /// The header's one value as text, or `None`.
    pub fn single(&self, name: &str) -> Option<String> {
        self.header(name).ok().flatten()
    }
}

/// An answer as it leaves: the entry point hands it to its host.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

/// What the handlers see of a request: its head, and the body on a route that takes one
/// (empty on the others), already known to be within [`MAX_BODY_BYTES`].
#[derive(Debug, Default)]
pub struct Request {
    pub method: String,
    /// The path without the query string, exactly as sent (no percent-decoding).
    pub path: String,
    /// The query string, without its `?` (empty when none).
    pub query: String,
    pub authorization: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// A successful answer: a status, a JSON body (none for 204) and extra headers, and
/// any work that finishes after the answer has left.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Option<Body>,
    pub headers: Vec<(&'static str, String)>,
    pub then: Option<Then>,
}

/// Work a handler finishes after its answer is decided: the answer cannot depend on it.
/// The default build sends the answer first (the instance lives on until the work is
/// done); the p3 build does it before the answer leaves (Spin 4 would cut it off).
pub struct Then(LocalBoxFuture<'static, ()>);

impl Then {
    pub fn new(work: impl Future<Output = ()> + 'static) -> Then {
        Then(Box::pin(work))
    }

    pub async fn run(self) {
        self.0.await
    }
}

impl std::fmt::Debug for Then {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Then(..)")
    }
}

/// What an answer carries: JSON on every route but `GET /metrics`, which speaks the
/// Prometheus text format.
#[derive(Debug, PartialEq)]
pub enum Body {
    Json(serde_json::Value),
    Text {
        content_type: &'static str,
        text: String,
    },
}

impl Answer {
    pub fn json(status: u16, body: impl Serialize) -> Result<Answer, Failure> {
        let body = serde_json::to_value(body).map_err(Failure::Encoding)?;
        Ok(Answer {
            status,
            body: Some(Body::Json(body)),
            headers: Vec::new(),
            then: None,
        })
    }

    pub fn text(content_type: &'static str, text: String) -> Answer {
        Answer {
            status: 200,
            body: Some(Body::Text { content_type, text }),
            headers: Vec::new(),
            then: None,
        }
    }

    /// The `error` code of a JSON answer that reports one (`GET /health`'s 503).
    pub fn error_code(&self) -> Option<&str> {
        match &self.body {
            Some(Body::Json(body)) => body["error"].as_str(),
            _ => None,
        }
    }
}

/// What a request says before its body: enough to route it and know its caller.
pub fn head(head: &Head) -> Result<Request, ApiError> {
    let (path, query) = match head.path_with_query.split_once('?') {
        Some((path, query)) => (path.to_string(), query.to_string()),
        None => (head.path_with_query.clone(), String::new()),
    };
    Ok(Request {
        method: head.method.clone(),
        path,
        query,
        authorization: head.header("authorization")?,
        content_type: head.header("content-type")?,
        body: Vec::new(),
    })
}

/// Reads the body that `body` streams, for a route that takes one: a `413` past
/// [`MAX_BODY_BYTES`], a `408` unless it has all come within [`BODY_DEADLINE`].
pub async fn body<E>(
    head: &Head,
    body: impl Stream<Item = Result<Vec<u8>, E>>,
) -> Result<Vec<u8>, ApiError> {
    if let Some(length) = head.header("content-length")? {
        if length
            .trim()
            .parse::<u64>()
            .map_or(true, |n| n > MAX_BODY_BYTES as u64)
        {
            return Err(ApiError::PayloadTooLarge);
        }
    }
    // Read at most one byte past the limit: a chunked body never gets buffered whole.
    let reading = async {
        let mut bytes = Vec::new();
        let mut stream = std::pin::pin!(body);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|_| ApiError::BadRequest("the request body could not be read".into()))?;
            bytes.extend_from_slice(&chunk);
            if bytes.len() > MAX_BODY_BYTES {
                return Err(ApiError::PayloadTooLarge);
            }
        }
        Ok(bytes)
    };
    match select(
        std::pin::pin!(reading),
        std::pin::pin!(pause(BODY_DEADLINE)),
    )
    .await
    {
        Either::Left((read, _)) => read,
        Either::Right(_) => Err(ApiError::RequestTimeout),
    }
}

pub fn respond(
    reply: Result<Answer, ApiError>,
    cors_headers: Vec<(&'static str, String)>,
    request_id: &str,
) -> Reply {
    let (status, body, mut headers) = match reply {
        Ok(reply) => (reply.status, reply.body, reply.headers),
        Err(error) => (
            error.status(),
            Some(Body::Json(error.body())),
            error.headers(),
        ),
    };
    // Answers are not to be reused, unless the handler said how long they may be.
    if !headers.iter().any(|(name, _)| *name == "cache-control") {
        headers.insert(0, ("cache-control", "no-store".to_string()));
    }
    headers.push(("x-request-id", request_id.to_string()));
    // No answer is to be read as anything but its declared type.
    headers.push(("x-content-type-options", "nosniff".to_string()));
    headers.extend(cors_headers);
    let body = match body {
        Some(Body::Json(body)) => {
            headers.push(("content-type", "application/json".to_string()));
            body.to_string()
        }
        Some(Body::Text { content_type, text }) => {
            headers.push(("content-type", content_type.to_string()));
            text
        }
        None => String::new(),
    };
    Reply {
        status,
        headers,
        body: body.into_bytes(),
    }
}

/// The query parameter `name`, if given once; a parameter given twice is a 400.
pub fn query_param<'a>(request: &'a Request, name: &str) -> Result<Option<&'a str>, ApiError> {
    let mut values = request
        .query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .filter(|(key, _)| *key == name)
        .map(|(_, value)| value);
    match (values.next(), values.next()) {
        (value, None) => Ok(value),
        _ => Err(ApiError::BadRequest(format!(
            "{name} is given more than once"
        ))),
    }
}

/// A page's `after` (an id, or `0`; `None` when left out) and `limit` (1 to `max`,
/// `default` when left out).
pub fn page_params(
    request: &Request,
    default: u32,
    max: u32,
) -> Result<(Option<u64>, u32), ApiError> {
    let after = match query_param(request, "after")? {
        None => None,
        Some("0") => Some(0),
        Some(text) => Some(
            seckill_core::parse_id(text)
                .ok_or_else(|| ApiError::BadRequest("after must be an id or 0".into()))?,
        ),
    };
    let limit = match query_param(request, "limit")? {
        None => default,
        Some(text) => text
            .parse()
            .ok()
            .filter(|limit| (1..=max).contains(limit))
            .ok_or_else(|| ApiError::BadRequest(format!("limit must be between 1 and {max}")))?,
    };
    Ok((after, limit))
}

/// Requires a JSON body, then parses it. Unknown fields and wrong types are 400s.
pub fn json_body<T: serde::de::DeserializeOwned>(request: &Request) -> Result<T, ApiError> {
    let media_type = request
        .content_type
        .as_deref()
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase());
    if media_type.as_deref() != Some("application/json") {
        return Err(ApiError::BadRequest(
            "Content-Type must be application/json".into(),
        ));
    }
    serde_json::from_slice(&request.body)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_body(content_type: Option<&str>, body: &str) -> Request {
        Request {
            content_type: content_type.map(str::to_string),
            body: body.as_bytes().to_vec(),
            ..Request::default()
        }
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        #[allow(dead_code)]
        n: i64,
    }

    #[test]
    fn json_bodies_need_the_json_media_type() {
        assert!(json_body::<Sample>(&with_body(Some("application/json"), r#"{"n":1}"#)).is_ok());
        assert!(json_body::<Sample>(&with_body(
            Some("Application/JSON; charset=utf-8"),
            r#"{"n":1}"#
        ))
        .is_ok());
        for content_type in [None, Some("text/plain"), Some("application/jsonx")] {
            let error = json_body::<Sample>(&with_body(content_type, r#"{"n":1}"#)).unwrap_err();
            assert_eq!(error.status(), 400, "{content_type:?}");
        }
    }

    #[test]
    fn malformed_json_and_unknown_fields_are_bad_requests() {
        for body in [
            "",
            "{",
            "[]",
            r#"{"n":"1"}"#,
            r#"{"n":1,"m":2}"#,
            r#"{"n":1.5}"#,
        ] {
            let error =
                json_body::<Sample>(&with_body(Some("application/json"), body)).unwrap_err();
            assert_eq!(error.code(), "bad_request", "{body:?}");
        }
    }
}
