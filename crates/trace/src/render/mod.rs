//! The **renderers**: a trace and its analysis as text, and as a trace
//! file people open (Chrome trace-event JSON for ui.perfetto.dev).

pub mod perfetto;
pub mod text;
