//! The last step: what is written about a message after delivery tried
//! it — delivery status notifications to its sender ([`bounce`]), which go
//! back in through the intake like any mail. (The mail log, which every
//! step writes, is `crate::log`.)

pub mod bounce;
