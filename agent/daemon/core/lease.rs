//! The lease on the board: who may take it, taking it with a switch (renewed in place
//! when its holder switches again), its timeout and renewal, and its end, which restores
//! what was requested before it.

use super::{err, ApplyError, Core, Lease, Peer};
use crate::board::Values;
use crate::control::state::{Owner, OwnerKind};
use crate::control::{plan, Switch};
use crate::ipc::protocol::*;
use std::time::{Duration, Instant};

impl Core {
    /// Why `peer` may not take the lease with a `kind` request now, if it may not: it
    /// lacks control permission for `what`, or someone else holds the lease.
    pub(super) fn refuse_lease(
        &self,
        peer: &Peer,
        kind: LeaseKind,
        what: &str,
    ) -> Option<ReplyBody> {
        if !peer.may_control {
            return Some(err(
                ErrorCode::Forbidden,
                format!("{what} needs control permission (root or the control group)"),
            ));
        }
        let l = self.lease.as_ref()?;
        (l.client != peer.client
            && !(l.holder.lease == LeaseKind::Persistent && kind == LeaseKind::Persistent))
            .then(|| {
                err(
                    ErrorCode::Busy,
                    format!(
                        "the board is held by {} ({} lease)",
                        l.holder.client,
                        lease_name(l.holder.lease)
                    ),
                )
            })
    }

    /// Makes `target` the requested values under `peer`'s lease of `kind`, taking the
    /// lease (or taking over a persistent one) once the switch succeeded; the lease's
    /// prior stays what was requested before its first change. The switch is logged as
    /// `what` at its level.
    pub(super) fn lease_and_apply(
        &mut self,
        peer: &Peer,
        target: Values,
        kind: LeaseKind,
        expiry: Expiry,
        (what, level): (&str, log::Level),
    ) -> Result<Switch, ApplyError> {
        let asked = match expiry {
            Expiry::Asked(ms) => ms,
            Expiry::Kept => None,
        };
        // 0, given or configured, is no timeout.
        let timeout = asked
            .or(Some(self.config.lease_timeout_ms))
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis);
        // The lease changes hands only once the switch succeeded.
        let prior = self
            .lease
            .as_ref()
            .map_or_else(|| self.requested.clone(), |l| l.prior.clone());
        let previous = self.lease.as_ref().map(|l| l.client);
        let before = std::mem::replace(&mut self.requested, target);
        let sw = match self.apply_effective() {
            Ok(sw) => sw,
            Err(e) => {
                // Every control write is in the log, a refused or rolled-back one too.
                log::warn!(
                    "{what} by {} (pid {}, uid {}) failed: {e}",
                    peer.name,
                    peer.pid,
                    peer.uid
                );
                self.take_request_back(before);
                return Err(e);
            }
        };
        match previous {
            None => self.external.clear(),
            Some(c) if c != peer.client => {
                if let Some(tx) = self.events.get(&c) {
                    tx.send(ReplyBody::LeaseEnded {
                        reason: format!("{} took over the persistent lease", peer.name),
                    });
                }
            }
            Some(_) => {}
        }
        log::log!(
            level,
            "{what} by {} (pid {}, uid {}): {} write(s) in {:.1} us, {} lease",
            peer.name,
            peer.pid,
            peer.uid,
            sw.steps.len(),
            sw.elapsed_ns as f64 / 1000.0,
            lease_name(kind)
        );
        let session_timeout = (kind == LeaseKind::Session).then_some(timeout).flatten();
        let expires = session_timeout.map(|t| Instant::now() + t);
        match &mut self.lease {
            // The holder switching again (a scheduler's phase switch): its lease is
            // renewed in place, its prior kept, nothing allocated unless its name changed
            // (a `hello` since its last `set_mode`).
            Some(l) if l.client == peer.client => {
                l.holder.lease = kind;
                if matches!(expiry, Expiry::Asked(_)) || kind != LeaseKind::Session {
                    l.timeout = session_timeout;
                }
                l.expires = l.timeout.map(|t| Instant::now() + t);
                if !is_named(&l.holder.client, &peer.name, peer.pid) {
                    l.holder.client = with_pid(&peer.name, peer.pid).into();
                }
            }
            _ => {
                self.lease = Some(Lease {
                    client: peer.client,
                    holder: Holder {
                        client: with_pid(&peer.name, peer.pid).into(),
                        pid: peer.pid,
                        uid: peer.uid,
                        lease: kind,
                    },
                    prior,
                    timeout: session_timeout,
                    expires,
                })
            }
        }
        self.sync_state_owner();
        Ok(sw)
    }

    /// Whether `peer` holds the board's lease.
    pub fn holds(&self, peer: &Peer) -> bool {
        self.lease.as_ref().is_some_and(|l| l.client == peer.client)
    }

    /// Ends `peer`'s own lease (restoring the board) for `why`; nothing if it holds none.
    pub fn end_own_lease(&mut self, peer: &Peer, why: &str) {
        if self.holds(peer) {
            self.end_lease(why);
        }
    }

    /// `release`: the caller's own lease, or (with control permission) someone else's
    /// persistent lease, whose holder is told. Someone else's session lease is `busy`
    /// whoever asks (only its holder's end ends it); someone else's persistent lease
    /// without control permission is `forbidden`, like every refused control request.
    pub(super) fn release(&mut self, peer: &Peer) -> ReplyBody {
        match &self.lease {
            None => ReplyBody::Released { restored: false },
            Some(l) if l.client == peer.client => ReplyBody::Released {
                restored: self.end_lease(&format!("released by {}", peer.name)),
            },
            Some(l) if l.holder.lease == LeaseKind::Session => err(
                ErrorCode::Busy,
                format!(
                    "the board is held by {} (session lease): only its holder can release it",
                    l.holder.client
                ),
            ),
            Some(_) if !peer.may_control => err(
                ErrorCode::Forbidden,
                "releasing another client's persistent lease needs control permission (root or the control group)",
            ),
            Some(_) => {
                let why = format!("released by {}", peer.name);
                self.notify_holder(ReplyBody::LeaseEnded {
                    reason: why.clone(),
                });
                ReplyBody::Released {
                    restored: self.end_lease(&why),
                }
            }
        }
    }

    /// Ends the lease and restores what was requested before it (keeping knobs changed
    /// behind jpower's back unless the config says to override them).
    pub(super) fn end_lease(&mut self, why: &str) -> bool {
        if self.lease.is_none() {
            return false;
        }
        // Notice changes behind jpower's back before planning from what it last wrote.
        self.detect_external();
        let Some(lease) = self.lease.take() else {
            return false;
        };
        let mut target = lease.prior;
        if !self.config.restore_overrides_external {
            for &k in &self.external {
                target[k] = self.controller.current()[k];
            }
        }
        plan::make_ordered(self.controller.board(), &mut target);
        let before = std::mem::replace(&mut self.requested, target);
        self.sync_state_owner();
        match self.apply_effective() {
            Ok(sw) => {
                log::info!(
                    "lease of {} ended ({why}): restored with {} write(s)",
                    lease.holder.client,
                    sw.steps.len()
                );
                true
            }
            Err(e) => {
                log::error!(
                    "lease of {} ended ({why}) but restoring failed: {e}",
                    lease.holder.client
                );
                self.take_request_back(before);
                false
            }
        }
    }

    /// Keeps the state file's owner in step with the lease. A persistent lease's holder
    /// owns it as a direct `jpower set` would, so that its mode outlives the agent, a
    /// crash included (until `jpower restore`; the next agent holds it again). Otherwise
    /// the agent owns it, so that a crash restores the baseline. The file is written only
    /// when its owner changes: a holder's switches in place cost nothing.
    pub(super) fn sync_state_owner(&mut self) {
        // The caps' overlay is saved before the state is handed to a persistent holder,
        // and removed after it is handed back: a kill between the two never leaves the
        // holder's state capped without it.
        let effective = self.guard.clamp(self.controller.board(), &self.requested);
        self.sync_caps_overlay(&effective, false);
        self.hand_state_over();
        self.sync_caps_overlay(&effective, true);
    }

    /// [`Core::sync_state_owner`]'s owner.
    fn hand_state_over(&mut self) {
        let persistent = self
            .lease
            .as_ref()
            .filter(|l| l.holder.lease == LeaseKind::Persistent);
        let (kind, pid) = persistent.map_or((OwnerKind::Agent, std::process::id()), |l| {
            (OwnerKind::Cli, l.holder.pid)
        });
        let now = self.controller.owner();
        // By connection too: two connections of one process are two holders (a holder's
        // rename, which a scheduler's phase switch may undo, writes nothing).
        let client = persistent.map(|l| l.client);
        let same = now.kind == kind
            && now.pid == pid
            && (client.is_none() || self.owner_client.is_none_or(|c| Some(c) == client));
        self.owner_client = client;
        if same {
            return;
        }
        let owner = match persistent {
            Some(l) => Owner::new(kind, pid, l.holder.client.to_string()),
            None => Owner::agent(),
        };
        // With nothing written yet (a mode that needed no write), the state the agent's
        // first write saves (a guard's cap, a budget) is the holder's from the start.
        if self.controller.state().is_some() {
            self.controller.set_state_owner(owner);
        } else {
            self.controller.set_owner(owner);
        }
    }

    /// A request of `client`'s is pending (a scheduler's gate): if it holds a session
    /// lease with a timeout, that counts as a `renew`.
    pub fn heartbeat(&mut self, client: u64) {
        if let Some(l) = self.lease.as_mut().filter(|l| l.client == client) {
            l.expires = l.timeout.map(|t| Instant::now() + t);
        }
    }

    /// Whether connection `client` holds the lease.
    pub fn holds_lease(&self, client: u64) -> bool {
        self.lease.as_ref().is_some_and(|l| l.client == client)
    }

    /// A connection closed: its session lease ends.
    pub fn disconnect(&mut self, client: u64) {
        self.events.remove(&client);
        if self
            .lease
            .as_ref()
            .is_some_and(|l| l.client == client && l.holder.lease == LeaseKind::Session)
        {
            self.end_lease("the client disconnected");
        }
    }
}

/// `session` or `persistent`, as the protocol spells them.
fn lease_name(kind: LeaseKind) -> &'static str {
    match kind {
        LeaseKind::Session => "session",
        LeaseKind::Persistent => "persistent",
    }
}

/// A switch's say over its lease's timeout.
#[derive(Debug, Clone, Copy)]
pub(super) enum Expiry {
    /// `set_mode`'s `timeout_ms`: `None` takes the configuration's `lease_timeout_ms`.
    Asked(Option<u64>),
    /// The holder's own timeout, renewed (a phase switch, `set_averaging`); the
    /// configuration's for a lease the switch takes.
    Kept,
}

/// Whether `holder` is [`with_pid`]`(name, pid)`, without making it.
fn is_named(holder: &str, name: &str, pid: u32) -> bool {
    holder == name
        || holder
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(" (pid "))
            .and_then(|rest| rest.strip_suffix(')'))
            .is_some_and(|p| p.parse::<u32>() == Ok(pid))
}

/// `name` with `(pid P)` appended, unless a client's name already ends with it.
pub(super) fn with_pid(name: &str, pid: u32) -> String {
    let suffix = format!("(pid {pid})");
    if name.ends_with(&suffix) {
        name.to_string()
    } else {
        format!("{name} {suffix}")
    }
}
