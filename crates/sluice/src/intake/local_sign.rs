//! Whether an ordinary local account's mail (sendmail, not root nor the
//! daemon's account) may carry our DKIM signature: only for a From: the
//! account owns (security review M5; issue 38):
//!
//! - its own address, `login@hostname`, always;
//! - with `[restrictions] sender_login_maps`, an address that map gives
//!   the account's login, looked up as Postfix's smtpd_sender_login_maps
//!   (postconf(5), `mail_addr_find`): the full address, then without its
//!   extension (`recipient_delimiter`), then `user` when the domain is
//!   local, then `@domain`; the answer a list of logins separated by
//!   commas or blanks, compared without regard to case (Postfix's
//!   strcasecmp_utf8).
//!
//! Anything else goes unsigned and is still taken, with a
//! `dkim_not_signed` event naming the cause: `sign_local_users_off`,
//! `local_from_authors` (more than one From: field, or a From: naming
//! several mailboxes), `local_from` (an address the account does not
//! own), `sender_login_map_failed` (the map could not answer: the table
//! logs its own `lookup_failed`). A map that fails does not refuse the
//! mail: the signature is ours to give, the mail the user's to send.
//!
//! Trust: the From: header is the local user's; the map and the keys are
//! the administrator's; the login is the socket's peer credentials'.
//! Invariants: the address asked about is the very one whose domain
//! chooses the key (`dkim::from_address`), so no key is reached through
//! an address the map was not asked about; a From: with several authors
//! is never signed (our signature would vouch for all of them); "cannot
//! tell" is "do not sign".

use super::dkim;
use super::Intake;
use crate::message::address::domain_of;
use crate::tables::search::Rules;

/// Why the account's mail is not signed (the event's `cause`).
pub(super) type Cause = &'static str;

/// `Ok` when the message of account `own` (`login@hostname`) may be
/// signed; the cause otherwise.
pub(super) async fn may_sign(intake: &Intake, own: &str, body: &[u8]) -> Result<(), Cause> {
    if !intake.config.dkim.sign_local_users {
        return Err("sign_local_users_off");
    }
    if dkim::from_authors(body) != (1, 1) {
        return Err("local_from_authors");
    }
    let from = dkim::from_address(body).unwrap_or_default();
    if from.eq_ignore_ascii_case(own) {
        return Ok(());
    }
    if intake.sender_login.is_empty() {
        return Err("local_from");
    }
    let login = own.rsplit_once('@').map_or(own, |(login, _)| login);
    owned_by(intake, &from, login).await
}

/// Whether the sender login map gives `from` to `login`.
async fn owned_by(intake: &Intake, from: &str, login: &str) -> Result<(), Cause> {
    // The address in its canonical form (as a client's MAIL FROM would
    // be looked up); one that does not parse is nobody's.
    let Ok(mailbox) = sluice_proto::address::parse_mailbox(from) else {
        return Err("local_from");
    };
    let address = mailbox.address();
    let rules = Rules {
        delimiters: &intake.config.recipient_delimiter,
        local: intake.mailboxes.is_local_domain(domain_of(&address)),
        owner_request_special: true,
    };
    match crate::tables::find_address(&intake.sender_login, &address, &rules).await {
        Err(_) => Err("sender_login_map_failed"),
        Ok(Some(found)) if found.values.iter().any(|o| o.eq_ignore_ascii_case(login)) => Ok(()),
        Ok(_) => Err("local_from"),
    }
}
