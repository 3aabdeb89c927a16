//! Signal page: create/attach (`lifecycle`), the words the controller and
//! its readers share (`words`), every bad-input error (`bad_input`), the
//! permission model — who may write the page file and the batch segment
//! (`permissions`), and the golden vectors in `testdata/signal/` (`golden`;
//! regenerate them with `ELFEN_BLESS=1 cargo test -p elfen-shm --test page`
//! after an ABI bump).

mod bad_input;
mod common;
mod golden;
mod lifecycle;
mod permissions;
mod words;
