//! What a browser meets: the server answers only requests that name it and pages it trusts.
//!
//! A page the user has open can send requests to `127.0.0.1:3000` too. Three checks keep it
//! from driving the server:
//! - `Host` must name the server: its bound address, `localhost`/`127.0.0.1`/`[::1]` when it
//!   listens on loopback, any IP literal when it listens on every address, or a name configured
//!   with `--allow-host` (with a port, only that port). A page that rebinds its own DNS name to
//!   127.0.0.1 (DNS rebinding) sends its own name as `Host` and is refused.
//! - `Origin`, when a browser sends one, must be the server's own (same origin: the origin's
//!   host and port are the request's `Host`) or one configured with `--allow-origin`. This
//!   covers the WebSocket upgrade, which browsers never preflight.
//! - A chat `POST` must be `application/json`: browsers send `text/plain` and forms cross-origin
//!   without asking first ([`require_json`], called by the route).
//!
//! Allowed origins get CORS answers (preflight included) from tower-http's `CorsLayer`.
//! Refusals are the JSON errors of [`crate::error`], with status 403.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, request::Parts, HeaderMap, HeaderValue, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::error::ApiError;

/// Which hosts and origins a server answers, beside its own address.
#[derive(Debug, Clone)]
pub struct EdgePolicy {
    addr: SocketAddr,
    /// Lower-case host names (`app.example.com`), optionally with a port.
    hosts: Vec<String>,
    /// Normalized origins (`https://app.example.com`, `http://localhost:5173`).
    origins: Vec<String>,
}

/// A configured host or origin that cannot match anything.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EdgeConfigError {
    #[error(
        "--allow-origin {0:?} is not an origin: give scheme://host[:port] with no path, \
         e.g. https://app.example.com or http://localhost:5173"
    )]
    BadOrigin(String),
    #[error("--allow-host {0:?} is not a host name: give a name such as chat.example.com, optionally with :port")]
    BadHost(String),
}

impl EdgePolicy {
    /// The policy of a server bound to `addr` that also answers the names `hosts` and the
    /// browser origins `origins`.
    pub fn new(
        addr: SocketAddr,
        hosts: &[String],
        origins: &[String],
    ) -> Result<EdgePolicy, EdgeConfigError> {
        let hosts = hosts
            .iter()
            .map(|h| {
                let lower = h.trim().to_ascii_lowercase();
                match lower.parse::<axum::http::uri::Authority>() {
                    Ok(a) if a.as_str() == lower && !lower.contains('@') => Ok(lower),
                    _ => Err(EdgeConfigError::BadHost(h.clone())),
                }
            })
            .collect::<Result<_, _>>()?;
        let origins = origins
            .iter()
            .map(|o| normalize_origin(o).ok_or_else(|| EdgeConfigError::BadOrigin(o.clone())))
            .collect::<Result<_, _>>()?;
        Ok(EdgePolicy {
            addr,
            hosts,
            origins,
        })
    }

    /// Whether a `Host` value names this server.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let Ok(authority) = host.parse::<axum::http::uri::Authority>() else {
            return false;
        };
        if self
            .hosts
            .iter()
            .any(|allowed| *allowed == host || *allowed == authority.host())
        {
            return true;
        }
        // Rebinding needs a name the attacker controls: an IP literal, or `localhost` on a
        // loopback server, cannot be one, on any port (a dev proxy passes its own).
        let name = authority.host();
        let ip = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        let bound = self.addr.ip();
        match ip {
            Some(ip) => {
                bound.is_unspecified() || ip == bound || (bound.is_loopback() && ip.is_loopback())
            }
            None => name == "localhost" && (bound.is_loopback() || bound.is_unspecified()),
        }
    }

    /// Whether a browser page of `origin` may use the server reached as `host`.
    pub fn origin_allowed(&self, origin: &str, host: &str) -> bool {
        let Some(origin) = normalize_origin(origin) else {
            return false;
        };
        self.origins.contains(&origin) || same_origin(&origin, host)
    }
}

/// `scheme://host[:port]`, lower-case, default port dropped; `None` for anything else
/// (`null`, a path, user info).
fn normalize_origin(origin: &str) -> Option<String> {
    let uri: Uri = origin.trim().parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    if authority.as_str().contains('@') || uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
        return None;
    }
    let host = authority.host().to_ascii_lowercase();
    let default = match scheme.as_str() {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    };
    Some(match authority.port_u16() {
        Some(port) if Some(port) != default => format!("{scheme}://{host}:{port}"),
        _ => format!("{scheme}://{host}"),
    })
}

/// Whether the (normalized) origin is the server reached as `host`: the same host, and the
/// same port (a `Host` without a port matches any: a proxy in front decides the port).
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let host = host.trim().to_ascii_lowercase();
    let (Ok(origin), Ok(host)) = (
        rest.parse::<axum::http::uri::Authority>(),
        host.parse::<axum::http::uri::Authority>(),
    ) else {
        return false;
    };
    let origin_port = origin.port_u16().or(match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    });
    origin.host() == host.host() && host.port_u16().is_none_or(|port| Some(port) == origin_port)
}

/// The host a request names: its `Host` header, or the authority of an absolute URI.
fn request_host(headers: &HeaderMap, uri: &Uri) -> Option<String> {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()))
}

/// Refuses requests that do not name the server or come from a page it does not allow.
pub async fn guard(policy: Arc<EdgePolicy>, request: Request, next: Next) -> Response {
    match check(&policy, request.headers(), request.uri()) {
        Ok(()) => next.run(request).await,
        Err(refused) => {
            tracing::debug!(error = %refused, "request refused at the edge");
            refused.into_response()
        }
    }
}

fn check(policy: &EdgePolicy, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
    let Some(host) = request_host(headers, uri) else {
        return Err(ApiError::Forbidden(
            "the request has no Host header; send the server's address as Host".to_owned(),
        ));
    };
    if !policy.host_allowed(&host) {
        return Err(ApiError::Forbidden(format!(
            "Host {:?} does not name this server; a proxy in front of it must pass a Host the \
             server knows (start it with --allow-host NAME)",
            truncated(&host)
        )));
    }
    for origin in headers.get_all(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !policy.origin_allowed(origin, &host) {
            return Err(ApiError::Forbidden(format!(
                "origin {:?} may not use this server: pages are served from its own origin or \
                 one started with --allow-origin",
                truncated(origin)
            )));
        }
    }
    Ok(())
}

/// At most 100 characters of a client's string, for an error message.
fn truncated(s: &str) -> String {
    match s.char_indices().nth(100) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_owned(),
    }
}

/// Refuses a chat body that is not declared JSON (with 415).
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = declared.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else if declared.is_empty() {
        Err(ApiError::UnsupportedMediaType("no content-type".to_owned()))
    } else {
        Err(ApiError::UnsupportedMediaType(truncated(declared)))
    }
}

/// CORS answers for the allowed origins: which methods and headers a page may use, and that it
/// may read the stream's protocol header.
fn cors(policy: Arc<EdgePolicy>) -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(
            move |origin: &HeaderValue, parts: &Parts| {
                let host = request_host(&parts.headers, &parts.uri).unwrap_or_default();
                origin
                    .to_str()
                    .is_ok_and(|origin| policy.origin_allowed(origin, &host))
            },
        ))
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION])
        .expose_headers([header::HeaderName::from_static(
            "x-vercel-ai-ui-message-stream",
        )])
        .max_age(Duration::from_secs(600))
}

/// Puts the edge in front of a router: the guard first, then CORS.
pub fn protect(router: Router, policy: EdgePolicy) -> Router {
    let policy = Arc::new(policy);
    let guarded = Arc::clone(&policy);
    router.layer(cors(policy)).layer(axum::middleware::from_fn(
        move |request: Request, next: Next| guard(Arc::clone(&guarded), request, next),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(addr: &str, hosts: &[&str], origins: &[&str]) -> EdgePolicy {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        EdgePolicy::new(addr.parse().unwrap(), &own(hosts), &own(origins)).unwrap()
    }

    #[test]
    fn loopback_answers_its_own_names() {
        let p = policy("127.0.0.1:3000", &[], &[]);
        for ok in [
            "127.0.0.1:3000",
            "localhost:3000",
            "[::1]:3000",
            "LOCALHOST:3000",
            // A dev proxy in front passes its own.
            "localhost:5173",
            "127.0.0.1",
        ] {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for refused in [
            "evil.example:3000",
            "localhost.evil.example:3000",
            "10.0.0.1:3000",
            "",
            "a b",
        ] {
            assert!(!p.host_allowed(refused), "{refused}");
        }
    }

    #[test]
    fn configured_names_and_every_address() {
        let p = policy("0.0.0.0:8080", &["chat.example.com"], &[]);
        assert!(p.host_allowed("chat.example.com"));
        assert!(p.host_allowed("chat.example.com:443"));
        assert!(p.host_allowed("10.1.2.3:8080"));
        assert!(!p.host_allowed("rebound.example:8080"));
        let pinned = policy("0.0.0.0:8080", &["chat.example.com:8443"], &[]);
        assert!(pinned.host_allowed("chat.example.com:8443"));
        assert!(!pinned.host_allowed("chat.example.com:9000"));
    }

    #[test]
    fn origins_are_same_origin_or_configured() {
        let p = policy("127.0.0.1:3000", &[], &["http://localhost:5173"]);
        assert!(p.origin_allowed("http://127.0.0.1:3000", "127.0.0.1:3000"));
        assert!(p.origin_allowed("http://localhost:5173", "127.0.0.1:3000"));
        assert!(p.origin_allowed("HTTP://LOCALHOST:5173/", "127.0.0.1:3000"));
        assert!(!p.origin_allowed("http://localhost:3000", "127.0.0.1:3000"));
        assert!(!p.origin_allowed("https://evil.example", "127.0.0.1:3000"));
        assert!(!p.origin_allowed("null", "127.0.0.1:3000"));
        // Behind a proxy: https://chat.example.com reaches it as Host chat.example.com.
        assert!(p.origin_allowed("https://chat.example.com", "chat.example.com"));
    }

    #[test]
    fn bad_configuration_is_named() {
        let addr = "127.0.0.1:3000".parse().unwrap();
        assert!(EdgePolicy::new(addr, &[], &["example.com".into()]).is_err());
        assert!(EdgePolicy::new(addr, &[], &["https://example.com/app".into()]).is_err());
        assert!(EdgePolicy::new(addr, &["a/b".into()], &[]).is_err());
    }

    #[test]
    fn only_json_chat_bodies() {
        let mut headers = HeaderMap::new();
        assert!(require_json(&headers).is_err());
        headers.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(require_json(&headers).is_err());
        headers.insert(
            header::CONTENT_TYPE,
            "application/json; charset=utf-8".parse().unwrap(),
        );
        assert!(require_json(&headers).is_ok());
    }
}
