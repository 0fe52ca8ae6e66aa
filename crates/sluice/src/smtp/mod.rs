//! SMTP in both directions: the server that receives mail
//! ([`server`]) and the client that relays it ([`client`]), over streams
//! that may turn to TLS ([`io`]).

pub mod client;
pub mod io;
pub mod server;
