//! What both directions of SMTP share: streams that may turn to TLS
//! ([`io`]). The server is `crate::receive::smtp`, the client
//! `crate::deliver::smtp`.

pub mod io;
