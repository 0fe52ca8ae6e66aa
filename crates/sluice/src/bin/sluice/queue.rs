//! `sluice queue …`: postqueue and postsuper through the admin socket.

use crate::args::{QueueAction, QueueArgs};
use crate::CliError;

/// `sluice queue …`.
pub(crate) async fn queue(a: QueueArgs) -> Result<(), CliError> {
    use sluice::admin::protocol::Request;
    use sluice::tools::queue_cli;
    let data_dir = sluice::tools::locate::data_dir(a.config.config.as_deref())?;
    let request = queue_request(a.action)?;
    let listing = matches!(request, Request::List { .. });
    let show = matches!(request, Request::Show { .. } | Request::ShowMessage { .. });
    let response = queue_cli::call(&data_dir, &request).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&response)?);
    } else if show {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(queue_cli::show(&response).as_bytes())?;
        if let Some(message) = queue_cli::message(&response) {
            out.write_all(b"\nmessage:\n")?;
            out.write_all(&message)?;
        }
    } else if listing {
        print!("{}", queue_cli::mailq(&response.messages));
    } else {
        println!("{}", queue_cli::tally(&response));
    }
    Ok(())
}

/// The request a `sluice queue` command makes (IDs named `-` are read
/// from standard input).
pub(crate) fn queue_request(
    action: QueueAction,
) -> Result<sluice::admin::protocol::Request, CliError> {
    use sluice::admin::protocol::{Filter, Op, Request};
    use sluice::tools::queue_cli::targets;
    let apply = |op, ids: Vec<String>| -> Result<Request, CliError> {
        let (ids, all) = targets(ids, std::io::stdin().lock())?;
        Ok(Request::Apply { op, ids, all })
    };
    Ok(match action {
        QueueAction::List {
            sender,
            login,
            recipient,
            domain,
            state,
        } => Request::List {
            filter: Filter {
                sender,
                login,
                recipient,
                domain,
                state,
                older_than_secs: None,
            },
        },
        QueueAction::Show { id, body: false } => Request::Show { id },
        QueueAction::Show { id, body: true } => Request::ShowMessage { id },
        QueueAction::Flush { id, domain } => Request::Flush { id, domain },
        QueueAction::Delete {
            ids,
            all_deferred,
            older_than,
        } if ids.is_empty() => Request::Delete {
            ids,
            all_deferred,
            older_than_secs: older_than,
        },
        QueueAction::Delete { ids, .. } => apply(Op::Delete, ids)?,
        QueueAction::Hold { ids } => apply(Op::Hold, ids)?,
        QueueAction::Release {
            login: Some(who), ..
        } => Request::ReleaseLimited {
            kind: sluice::intake::limits::Kind::Login,
            who,
        },
        QueueAction::Release {
            sender: Some(who), ..
        } => Request::ReleaseLimited {
            kind: sluice::intake::limits::Kind::Sender,
            who,
        },
        QueueAction::Release { ids, .. } => apply(Op::Release, ids)?,
        QueueAction::Bounce { ids } => apply(Op::Bounce, ids)?,
        QueueAction::Requeue { ids } => apply(Op::Requeue, ids)?,
    })
}
