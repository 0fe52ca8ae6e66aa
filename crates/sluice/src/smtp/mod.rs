//! What both directions of SMTP share: streams that may turn to TLS
//! ([`io`]), and an outbound socket that is TCP or a Unix socket
//! ([`wire`]: SMTP and LMTP clients, milters). The server is
//! `crate::receive::smtp`, the client `crate::deliver::smtp`.

pub mod io;
pub mod wire;
