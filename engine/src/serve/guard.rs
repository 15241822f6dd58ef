//! What a request must pass before it is parsed: the API key, and the body limit (a larger body is
//! read to its end and refused with 413, so the client reads the answer instead of a reset).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;

/// With `--api-key`: the request must carry `Authorization: Bearer KEY` (401 otherwise).
pub(super) async fn authorize(
    State(s): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(key) = &s.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer)
            .unwrap_or_default();
        if !same_key(given.as_bytes(), key.as_bytes()) {
            let mut r = ApiError::unauthorized(
                "missing or wrong API key: send 'Authorization: Bearer KEY' with the server's --api-key",
            )
            .into_response();
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return r;
        }
    }
    next.run(req).await
}

/// The credentials of an `Authorization` value of the Bearer scheme, whose name is
/// case-insensitive (RFC 9110 §11.1).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Compare a presented key with the server's in time that depends only on the server key's
/// length, never on where the first difference is.
fn same_key(given: &[u8], want: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != want.len());
    for (i, w) in want.iter().enumerate() {
        diff |= w ^ given.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// The bytes a body may have past the limit that are still read (and dropped), so that the client,
/// which is still sending, reads the 413 instead of a reset connection.
const DRAIN_BEYOND_LIMIT: usize = 64 << 20;

/// Read a request body of at most `limit` bytes (a larger one: 413 naming the limit).
pub(super) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let too_large = |n: &str| {
        ApiError::too_large(format!(
            "the request body of {n} bytes exceeds this server's limit of {limit} bytes (--max-body)"
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = declared.filter(|&n| n > limit + DRAIN_BEYOND_LIMIT) {
        return Err(too_large(&n.to_string()));
    }
    let mut data = Vec::new();
    let mut seen = 0usize;
    let mut chunks = body.into_data_stream();
    while let Some(c) = chunks.next().await {
        let c = c.map_err(|e| ApiError::bad(format!("reading the request body: {e}")))?;
        seen += c.len();
        if seen <= limit {
            data.extend_from_slice(&c);
        } else if seen > limit + DRAIN_BEYOND_LIMIT {
            return Err(too_large(&format!("over {seen}")));
        }
    }
    if seen > limit {
        return Err(too_large(&seen.to_string()));
    }
    Ok(Bytes::from(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        assert_eq!(bearer("Bearer k1"), Some("k1"));
        assert_eq!(bearer("bearer k1"), Some("k1"));
        assert_eq!(bearer("BEARER  k1"), Some("k1"));
        assert_eq!(bearer("Basic k1"), None);
        assert_eq!(bearer("Bearerk1"), None);
    }

    #[test]
    fn keys_compare_equal_only_when_equal() {
        assert!(same_key(b"secret", b"secret"));
        assert!(!same_key(b"secreT", b"secret"));
        assert!(!same_key(b"secret!", b"secret"));
        assert!(!same_key(b"", b"secret"));
    }
}
