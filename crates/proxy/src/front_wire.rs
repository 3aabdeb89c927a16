//! The **wire-protocol front**: clients connect here as they would to the
//! LC service itself (`docs/lc-protocol.md`). One thread per client reads
//! its requests: work goes to the engine; a ping is answered at once (ok
//! while a replica is connected); a malformed request — an unknown kind,
//! or a payload over 64 KiB — is answered with status 1 to that client
//! alone (and, for the payload, its connection closed, as the services do);
//! other clients never notice.

use crate::engine::{Deliver, Engine, WireClient};
use crate::message::Request;
use bytes::Bytes;
use elfen_wire::{self as wire, Kind, RequestHeader, Response, Status};
use std::io::{BufReader, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long writing an answer to a client may block before that client is
/// dropped (it stopped reading).
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Accepts clients on `listener` until `stop` is set (then woken by a
/// connection to itself).
pub fn accept_loop(
    listener: TcpListener,
    engine: Arc<Engine>,
    idempotent: bool,
    fifo_priority: u8,
    stop: Arc<AtomicBool>,
) {
    crate::link::enter_priority(fifo_priority);
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Ok(s) = conn else { continue };
        engine.counters.clients.fetch_add(1, Ordering::Relaxed);
        let engine = engine.clone();
        let _ = std::thread::Builder::new()
            .name("elfen-proxy-client".into())
            .spawn(move || {
                crate::link::enter_priority(fifo_priority);
                serve_client(s, &engine, idempotent);
            });
    }
}

fn answer_now(client: &WireClient, id: u64, status: Status) {
    client.send(
        &Response {
            id,
            service_ns: 0,
            queued_ns: 0,
            status,
            result: 0,
        }
        .encode(),
    );
}

/// Reads one client's requests until it closes.
fn serve_client(s: TcpStream, engine: &Engine, idempotent: bool) {
    let _ = s.set_nodelay(true);
    let _ = s.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
    let Ok(w) = s.try_clone() else { return };
    let client = Arc::new(WireClient::new(w));
    let mut r = BufReader::with_capacity(64 * 1024, s);
    let mut head = [0u8; wire::REQUEST_HEADER];
    while r.read_exact(&mut head).is_ok() {
        let h = RequestHeader::decode(&head);
        if h.len > wire::MAX_PAYLOAD {
            engine.counters.malformed.fetch_add(1, Ordering::Relaxed);
            answer_now(&client, h.id, Status::BadRequest);
            // FIN first, then drop what the client still sends for a moment,
            // so the answer is not lost to a reset
            let s = r.get_ref();
            let _ = s.shutdown(Shutdown::Write);
            let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
            let mut sink = [0u8; 8192];
            let mut total = 0;
            while total < (1 << 20) {
                match r.read(&mut sink) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n,
                }
            }
            break;
        }
        let mut payload = vec![0u8; h.len as usize];
        if r.read_exact(&mut payload).is_err() {
            break;
        }
        match h.kind {
            Kind::Ping => {
                let up = engine.replicas.iter().any(|x| x.link.is_up());
                answer_now(
                    &client,
                    h.id,
                    if up { Status::Ok } else { Status::ServiceError },
                );
            }
            Kind::Work => engine.submit(
                Request::Wire {
                    arg: h.arg,
                    payload: Bytes::from(payload),
                },
                idempotent,
                Deliver::Wire {
                    client: client.clone(),
                    id: h.id,
                },
            ),
            Kind::Unknown(_) => {
                engine.counters.malformed.fetch_add(1, Ordering::Relaxed);
                answer_now(&client, h.id, Status::BadRequest);
            }
        }
    }
    // The connection closes once the answers still in flight for it are
    // written (the engine holds the client until then).
}
