//! The **HTTP/1.1 front**, served by hyper on a small tokio runtime of its
//! own (one thread): each request is read whole (at most
//! `max_body_bytes`), handed to the engine, and answered with the first
//! replica answer. Requests whose method is in `idempotent.http_methods`
//! (GET and HEAD by default) may be sent to both replicas; others go to
//! the active one only. A malformed request gets hyper's 400 on that
//! connection alone; a body too large gets 413; no replica, 502.

use crate::engine::{Deliver, Engine};
use crate::message::{Answer, HttpRequest, Request, hop_by_hop};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What the HTTP front needs to know.
#[derive(Debug, Clone)]
pub struct HttpFront {
    /// Methods that may be sent twice.
    pub idempotent_methods: Vec<String>,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
}

fn plain(status: u16, text: &str) -> hyper::Response<Full<Bytes>> {
    let mut r = hyper::Response::new(Full::new(Bytes::from(text.to_string())));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    r
}

async fn handle(
    req: hyper::Request<Incoming>,
    engine: Arc<Engine>,
    front: Arc<HttpFront>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, front.max_body_bytes).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => {
            engine.counters.malformed.fetch_add(1, Ordering::Relaxed);
            return Ok(plain(
                413,
                "elfen proxy: request body too large or cut off\n",
            ));
        }
    };
    let method = parts.method.as_str().to_string();
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let headers = parts
        .headers
        .iter()
        .filter(|(k, _)| !hop_by_hop(k.as_str()))
        .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    let idempotent = front.idempotent_methods.contains(&method);
    let (tx, rx) = tokio::sync::oneshot::channel();
    engine.submit(
        Request::Http(HttpRequest {
            method,
            target,
            headers,
            body,
        }),
        idempotent,
        Deliver::Http(tx),
    );
    Ok(match rx.await {
        Ok(Answer::Http(h)) => {
            let mut r = hyper::Response::new(Full::new(h.body));
            *r.status_mut() =
                hyper::StatusCode::from_u16(h.status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
            for (k, v) in h.headers {
                if let (Ok(k), Ok(v)) = (
                    hyper::header::HeaderName::from_bytes(k.as_bytes()),
                    hyper::header::HeaderValue::from_bytes(&v),
                ) {
                    r.headers_mut().append(k, v);
                }
            }
            r
        }
        _ => plain(502, "elfen proxy: no replica answered\n"),
    })
}

/// Serves HTTP clients on `listener` until `stop` is set.
pub fn accept_loop(
    listener: TcpListener,
    engine: Arc<Engine>,
    front: HttpFront,
    fifo_priority: u8,
    stop: Arc<AtomicBool>,
) {
    crate::link::enter_priority(fifo_priority);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("elfen proxy: cannot start the HTTP front: {e}");
            return;
        }
    };
    let front = Arc::new(front);
    rt.block_on(async move {
        if listener.set_nonblocking(true).is_err() {
            return;
        }
        let Ok(l) = tokio::net::TcpListener::from_std(listener) else {
            return;
        };
        while !stop.load(Ordering::Relaxed) {
            let accepted = tokio::select! {
                a = l.accept() => a,
                _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
            };
            let Ok((s, _)) = accepted else { continue };
            let _ = s.set_nodelay(true);
            engine.counters.clients.fetch_add(1, Ordering::Relaxed);
            let (engine, front) = (engine.clone(), front.clone());
            tokio::spawn(async move {
                let counters = engine.clone();
                let svc = service_fn(move |req| handle(req, engine.clone(), front.clone()));
                let served = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
                // hyper answered a request it could not parse with 400 and
                // closed that connection
                if served.is_err_and(|e| e.is_parse() || e.is_parse_too_large()) {
                    counters.counters.malformed.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
}
