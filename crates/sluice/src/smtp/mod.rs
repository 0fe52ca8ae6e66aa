//! SMTP in both directions: the server that receives mail
//! ([`server`]) and the client that relays it ([`client`]).

pub mod client;
pub mod server;
