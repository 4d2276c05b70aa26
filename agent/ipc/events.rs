//! A connection's events (lease ended, guard steps, outside changes, requests served):
//! what the agent's threads send to one connection, queued on a channel, with an eventfd
//! that wakes the connection's thread the moment one is sent, so that an event reaches
//! its client as it happens rather than at the thread's next look.
//!
//! The connection owns the eventfd; senders only point to it, so that whatever outlives a
//! connection holding a sender (an inference request queued by a client that has gone,
//! whose `served` event goes nowhere) holds no descriptor: a review closed a thousand
//! such connections and found the agent holding a thousand eventfds, and then accepting
//! nobody once it ran out.

use super::protocol::ReplyBody;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Weak};

/// A new queue: its sending end (clone it for every thread that sends) and its
/// connection's end.
pub fn queue() -> std::io::Result<(EventSender, EventQueue)> {
    let wake = Arc::new(EventFd::from_flags(
        EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
    )?);
    let (tx, rx) = mpsc::channel();
    Ok((
        EventSender {
            tx,
            wake: Arc::downgrade(&wake),
        },
        EventQueue { rx, wake },
    ))
}

/// Sends events to one connection.
#[derive(Debug, Clone)]
pub struct EventSender {
    tx: Sender<ReplyBody>,
    /// The connection's eventfd, while the connection lasts.
    wake: Weak<EventFd>,
}

impl EventSender {
    /// Queues `body` and wakes the connection; `false` where the connection has closed.
    pub fn send(&self, body: ReplyBody) -> bool {
        let sent = self.tx.send(body).is_ok();
        if sent {
            self.wake();
        }
        sent
    }

    /// Wakes the connection without an event: something else it waits for (its turn at
    /// the gate) has come.
    pub fn wake(&self) {
        // The counter only saturates after 2^64 - 2 unread wake-ups.
        if let Some(wake) = self.wake.upgrade() {
            let _ = wake.write(1);
        }
    }
}

/// One connection's end of its queue.
#[derive(Debug)]
pub struct EventQueue {
    rx: Receiver<ReplyBody>,
    wake: Arc<EventFd>,
}

impl EventQueue {
    /// The next queued event, if any.
    pub fn try_recv(&self) -> Option<ReplyBody> {
        self.rx.try_recv().ok()
    }

    /// Readable from the moment an event is sent until [`EventQueue::clear`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Clears the wake-up: call before taking the queued events, so that one sent after
    /// them wakes the thread again.
    pub fn clear(&self) {
        let _ = self.wake.read();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

    fn readable(q: &EventQueue) -> bool {
        let mut fds = [PollFd::new(q.fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).unwrap() == 1
    }

    #[test]
    fn a_sent_event_wakes_until_cleared_and_a_closed_queue_refuses() {
        let (tx, q) = queue().unwrap();
        assert!(!readable(&q));
        assert!(tx.clone().send(ReplyBody::Ok));
        assert!(tx.send(ReplyBody::Ok));
        assert!(readable(&q));
        q.clear();
        assert!(!readable(&q));
        assert_eq!(
            (q.try_recv(), q.try_recv()),
            (Some(ReplyBody::Ok), Some(ReplyBody::Ok))
        );
        assert_eq!(q.try_recv(), None);
        drop(q);
        assert!(!tx.send(ReplyBody::Ok));
        // The closed connection's eventfd is closed, whoever still holds a sender.
        assert!(tx.wake.upgrade().is_none());
    }
}
