//! The server's connections: who may be answered (the host names it was started for, pages of
//! its own origin) and how long a connection may keep its place (deadlines for reading a
//! request's head and for writing an answer).
//!
//! A page on another site can make its own name point at 127.0.0.1 (DNS rebinding) and so
//! become same-origin with this server; it still sends its own name as `Host`, which is refused
//! here. A request from a script on another origin carries that origin, which is refused too.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_io_timeout::TimeoutStream;

use super::ApiError;
use crate::data::error::printable;

/// How long a connection may take over each part of its work.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// To send a request's head, from the connection's start or the end of its last answer
    /// (an idle keep-alive connection is closed after it too).
    pub head: Duration,
    /// For one write of an answer to make progress: a client that stops reading is dropped.
    pub write: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            head: Duration::from_secs(10),
            write: Duration::from_secs(30),
        }
    }
}

/// The longest request line's target, and the most bytes of headers, answered with a JSON
/// error past them. (Beyond hyper's own limits, 64 KiB of target and 400 KiB of head, hyper
/// answers 414 or 431 itself, without a body.)
const MAX_URI_BYTES: usize = 8 * 1024;
const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Pause after a failed accept (out of file descriptors), before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Answers `app` on `listener` until the process ends: each connection on a task of its own,
/// every request first through [`guard`].
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    deadlines: Deadlines,
) -> std::io::Result<()> {
    let access = Arc::new(Access::for_address(listener.local_addr()?));
    let app = app.layer(axum::middleware::from_fn_with_state(access, guard));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, app.clone(), deadlines));
            }
            // Out of descriptors (or a connection reset before it was accepted): the head
            // deadline frees descriptors soon, so wait a little instead of spinning.
            Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
        }
    }
}

/// Serves one connection with HTTP/1.1 within `deadlines`.
async fn connection(stream: TcpStream, app: Router, deadlines: Deadlines) {
    let _ = stream.set_nodelay(true);
    let mut stream = TimeoutStream::new(stream);
    stream.set_write_timeout(Some(deadlines.write));
    let io = TokioIo::new(Box::pin(stream));
    let service = TowerToHyperService::new(app);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(deadlines.head);
    // The connection's end (a client gone, a deadline passed) is no error of the server's.
    let _ = http.serve_connection(io, service).await;
}

/// Who may be answered: requests whose host is one of `hosts` (`name:port`, lower case).
#[derive(Debug)]
pub struct Access {
    hosts: Vec<String>,
    /// Whether any IP address (with the port) is accepted as a host: when listening on every
    /// address (`--host 0.0.0.0 --allow-remote`), which addresses reach the server is not known,
    /// and an address, unlike a name, cannot be rebound.
    any_address: bool,
    port: u16,
}

impl Access {
    /// For a server listening on `address`: its loopback names, and the address itself.
    pub fn for_address(address: SocketAddr) -> Self {
        let port = address.port();
        let mut hosts: Vec<String> = ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .map(|name| format!("{name}:{port}"))
            .collect();
        hosts.push(address.to_string());
        Access {
            hosts,
            any_address: address.ip().is_unspecified(),
            port,
        }
    }

    /// Whether `host` (a Host header's value or a URI's authority) names this server.
    pub fn accepts(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let with_port = match host.parse::<SocketAddr>() {
            Ok(address) => address.to_string(),
            Err(_) if host.parse::<IpAddr>().is_ok() || !host.contains(':') => {
                format!("{host}:80")
            }
            Err(_) => host.clone(),
        };
        if self.hosts.contains(&with_port) {
            return true;
        }
        self.any_address
            && with_port
                .parse::<SocketAddr>()
                .is_ok_and(|a| a.port() == self.port)
    }

    /// Whether `origin` (an Origin header's value) is a page of this server.
    pub fn accepts_origin(&self, origin: &str) -> bool {
        origin
            .strip_prefix("http://")
            .is_some_and(|host| self.accepts(host))
    }

    /// The address to open, for messages.
    fn home(&self) -> &str {
        &self.hosts[0]
    }
}

/// Refuses what this server must not answer before any handler runs: a request for another
/// host (403), from a script of another origin (403), or whose target or head is too long (414,
/// 431); each with a JSON error, as the API's others.
pub async fn guard(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    match refusal(&access, &request) {
        Some(error) => error.into_response(),
        None => next.run(request).await,
    }
}

/// Why `request` is refused, if it is.
fn refusal(access: &Access, request: &Request) -> Option<ApiError> {
    let forbidden = |what: String| {
        Some(ApiError(
            StatusCode::FORBIDDEN,
            format!(
                "{what}: this server answers only its own page, at http://{}/ (or localhost, [::1]), so that no other site's page can use it",
                access.home()
            ),
        ))
    };
    let uri_bytes = request.uri().to_string().len();
    if uri_bytes > MAX_URI_BYTES {
        return Some(ApiError(
            StatusCode::URI_TOO_LONG,
            format!("the request's address has {uri_bytes} bytes, more than {MAX_URI_BYTES}: ask for less (a prompt is at most a few hundred characters)"),
        ));
    }
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if header_bytes > MAX_HEADER_BYTES {
        return Some(ApiError(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("the request's headers have {header_bytes} bytes, more than {MAX_HEADER_BYTES}: send fewer or shorter ones (clear this site's cookies)"),
        ));
    }
    let host = host_of(request.uri(), request.headers().get(header::HOST));
    match host {
        None => return forbidden("the request names no host (Host header)".into()),
        Some(host) if !access.accepts(&host) => {
            return forbidden(format!("the request is for host {}", shown(&host)))
        }
        Some(_) => {}
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = String::from_utf8_lossy(origin.as_bytes());
        if !access.accepts_origin(&origin) {
            return forbidden(format!(
                "the request comes from a page of {}",
                shown(&origin)
            ));
        }
    }
    None
}

/// The host a request is for: its target's authority (absolute form, which takes precedence in
/// HTTP/1.1), else its Host header; `None` where neither is given or the header is not text.
fn host_of(uri: &Uri, header: Option<&header::HeaderValue>) -> Option<String> {
    match uri.authority() {
        Some(authority) => Some(authority.as_str().to_string()),
        None => header?.to_str().ok().map(str::to_string),
    }
}

/// `text` for a message: at most 100 characters, invisible ones shown by their code points.
fn shown(text: &str) -> String {
    printable(&text.chars().take(100).collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::Access;

    #[test]
    fn only_the_servers_own_names_are_accepted() {
        let access = Access::for_address("127.0.0.1:8080".parse().unwrap());
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
        ] {
            assert!(access.accepts(host), "{host}");
        }
        for host in [
            "evil.example:8080",
            "evil.example",
            "127.0.0.1",
            "127.0.0.1:8081",
            "localhost",
            "localhost.evil.example:8080",
            "",
        ] {
            assert!(!access.accepts(host), "{host}");
        }
        assert!(access.accepts_origin("http://localhost:8080"));
        assert!(!access.accepts_origin("https://localhost:8080"));
        assert!(!access.accepts_origin("http://evil.example:8080"));
        assert!(!access.accepts_origin("null"));

        let port_80 = Access::for_address("127.0.0.1:80".parse().unwrap());
        assert!(port_80.accepts("localhost") && port_80.accepts("127.0.0.1"));

        let everywhere = Access::for_address("0.0.0.0:8080".parse().unwrap());
        assert!(everywhere.accepts("192.0.2.7:8080") && everywhere.accepts("[2001:db8::1]:8080"));
        assert!(!everywhere.accepts("evil.example:8080") && !everywhere.accepts("192.0.2.7:9"));
    }
}
