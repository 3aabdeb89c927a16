//! The integration tests of `elfen-cgroup`, one binary (ripgrep's habit):
//! fake roots per layout in temp dirs, and one test against the real
//! hierarchy that runs only as root.

mod common;
mod hybrid;
mod limits;
mod names;
mod owned;
mod real;
mod recovery;
mod v1;
mod v2;
