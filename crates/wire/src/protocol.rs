//! The LC wire protocol, version 1 (`docs/lc-protocol.md`): what an
//! open-loop generator (or the proxy) and an LC service exchange over TCP.
//! Little-endian; requests are 24 bytes plus a payload, responses 32 bytes. Requests may be pipelined on one connection; responses carry
//! the request's id and may come in any order.

/// Bytes of a request header.
pub const REQUEST_HEADER: usize = 24;
/// Bytes of a response.
pub const RESPONSE_BYTES: usize = 32;
/// Largest request payload.
pub const MAX_PAYLOAD: u32 = 65_536;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Work: the service runs the request and answers.
    Work,
    /// Readiness check: answered at once, no work, not counted.
    Ping,
    /// Anything else: answered with [`Status::BadRequest`].
    Unknown(u32),
}

impl Kind {
    fn code(self) -> u32 {
        match self {
            Kind::Work => 0,
            Kind::Ping => 1,
            Kind::Unknown(c) => c,
        }
    }

    fn from_code(c: u32) -> Kind {
        match c {
            0 => Kind::Work,
            1 => Kind::Ping,
            c => Kind::Unknown(c),
        }
    }
}

/// A request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Chosen by the client, echoed in the response.
    pub id: u64,
    /// Service-defined work hint (the built-in service: work in ns).
    pub arg: u64,
    /// Payload bytes that follow.
    pub len: u32,
    /// What it asks for.
    pub kind: Kind,
}

impl RequestHeader {
    /// The 24 header bytes.
    pub fn encode(&self) -> [u8; REQUEST_HEADER] {
        let mut b = [0u8; REQUEST_HEADER];
        b[..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..16].copy_from_slice(&self.arg.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b[20..24].copy_from_slice(&self.kind.code().to_le_bytes());
        b
    }

    /// Decodes 24 header bytes.
    pub fn decode(b: &[u8; REQUEST_HEADER]) -> RequestHeader {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        RequestHeader {
            id: u64_at(0),
            arg: u64_at(8),
            len: u32_at(16),
            kind: Kind::from_code(u32_at(20)),
        }
    }
}

/// A response's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Served.
    Ok,
    /// Malformed or unknown request.
    BadRequest,
    /// The service failed to serve it.
    ServiceError,
    /// Any other code.
    Other(u32),
}

impl Status {
    /// The code on the wire.
    pub fn code(self) -> u32 {
        match self {
            Status::Ok => 0,
            Status::BadRequest => 1,
            Status::ServiceError => 2,
            Status::Other(c) => c,
        }
    }

    fn from_code(c: u32) -> Status {
        match c {
            0 => Status::Ok,
            1 => Status::BadRequest,
            2 => Status::ServiceError,
            c => Status::Other(c),
        }
    }
}

/// A response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// The request's id.
    pub id: u64,
    /// Begin-to-end time of the work on the worker, ns (0 = not known).
    pub service_ns: u64,
    /// Arrival-to-begin time, ns (0 = not known).
    pub queued_ns: u64,
    /// The outcome.
    pub status: Status,
    /// Service-defined result (Lucene: hits returned).
    pub result: u32,
}

impl Response {
    /// The 32 bytes.
    pub fn encode(&self) -> [u8; RESPONSE_BYTES] {
        let mut b = [0u8; RESPONSE_BYTES];
        b[..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..16].copy_from_slice(&self.service_ns.to_le_bytes());
        b[16..24].copy_from_slice(&self.queued_ns.to_le_bytes());
        b[24..28].copy_from_slice(&self.status.code().to_le_bytes());
        b[28..32].copy_from_slice(&self.result.to_le_bytes());
        b
    }

    /// Decodes 32 bytes.
    pub fn decode(b: &[u8; RESPONSE_BYTES]) -> Response {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Response {
            id: u64_at(0),
            service_ns: u64_at(8),
            queued_ns: u64_at(16),
            status: Status::from_code(u32_at(24)),
            result: u32_at(28),
        }
    }
}

/// A whole request (header and payload) as bytes.
pub fn request_bytes(id: u64, arg: u64, payload: &[u8], kind: Kind) -> Vec<u8> {
    let h = RequestHeader {
        id,
        arg,
        len: payload.len() as u32,
        kind,
    };
    let mut v = Vec::with_capacity(REQUEST_HEADER + payload.len());
    v.extend_from_slice(&h.encode());
    v.extend_from_slice(payload);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_match_the_documented_offsets() {
        let h = RequestHeader {
            id: 7,
            arg: 99,
            len: 3,
            kind: Kind::Ping,
        };
        let b = h.encode();
        assert_eq!(RequestHeader::decode(&b), h);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 99);
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 1);
        let r = Response {
            id: 3,
            service_ns: 4,
            queued_ns: 5,
            status: Status::BadRequest,
            result: 10,
        };
        let rb = r.encode();
        assert_eq!(Response::decode(&rb), r);
        assert_eq!(u32::from_le_bytes(rb[24..28].try_into().unwrap()), 1);
        assert_eq!(
            RequestHeader::decode(
                &request_bytes(1, 2, b"abc", Kind::Unknown(9))[..24]
                    .try_into()
                    .unwrap()
            )
            .kind,
            Kind::Unknown(9)
        );
        assert_eq!(request_bytes(1, 2, b"abc", Kind::Work).len(), 27);
    }
}
