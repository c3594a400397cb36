//! The request/reply loop every netlink protocol of cni-net shares (rtnetlink, nf_tables,
//! ctnetlink): request → answers + ack, dump → messages until `NLMSG_DONE` (retried when
//! the kernel marks it `NLM_F_DUMP_INTR`), batch → one ack per operation.
//!
//! Two rules hold for all three. Replies are matched by sequence number, so a late answer to
//! an earlier request (or a notification) is skipped, never mistaken for ours. And every
//! reply to a request is read, also after a failure, so none is left queued to confuse the
//! next request on the socket. Bodies are decoded by the caller's closure, straight from the
//! receive buffer.

use std::io;
use std::os::fd::BorrowedFd;

use super::message::{messages, Message, NLMSG_ERROR};
use super::socket::{Socket, Wait};
use crate::error::NetlinkError;

/// How often a dump interrupted by concurrent changes is run before giving up.
pub(crate) const MAX_DUMP_ATTEMPTS: u32 = 10;

/// Sends requests and receives whole datagrams: a [`Socket`], or a scripted fake in tests.
pub(crate) trait Transport: Send {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// One datagram from the kernel; `Ok(None)` when `wait` ran out.
    fn recv(&mut self, wait: Wait) -> io::Result<Option<&[u8]>>;
    /// Joins a multicast group (the group's number, not the legacy bitmask).
    fn join_group(&mut self, _group: u32) -> io::Result<()> {
        Ok(())
    }
    fn leave_group(&mut self, _group: u32) -> io::Result<()> {
        Ok(())
    }
    /// The socket's descriptor, for work handed to another process (`None` for fakes).
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

impl Transport for Socket {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        Socket::send(self, bytes)
    }
    fn recv(&mut self, wait: Wait) -> io::Result<Option<&[u8]>> {
        Socket::recv(self, wait)
    }
    fn join_group(&mut self, group: u32) -> io::Result<()> {
        Socket::join_group(self, group)
    }
    fn leave_group(&mut self, group: u32) -> io::Result<()> {
        Socket::leave_group(self, group)
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(Socket::fd(self))
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        (**self).send(bytes)
    }
    fn recv(&mut self, wait: Wait) -> io::Result<Option<&[u8]>> {
        (**self).recv(wait)
    }
    fn join_group(&mut self, group: u32) -> io::Result<()> {
        (**self).join_group(group)
    }
    fn leave_group(&mut self, group: u32) -> io::Result<()> {
        (**self).leave_group(group)
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        (**self).fd()
    }
}

/// Why a batch failed.
#[derive(Debug)]
pub(crate) enum BatchError {
    /// The kernel refused operation `index` (the first refused one); nothing was applied.
    Operation { index: usize, source: NetlinkError },
    /// Every operation passed but the batch as a whole was refused.
    Commit(NetlinkError),
    /// The receive timeout ran out with this many operations unanswered.
    MissingAcks(usize),
    /// The socket failed or an answer could not be read; the outcome is unknown.
    Failed(NetlinkError),
}

/// A socket (or fake) and its sequence numbers.
pub(crate) struct Conversation<T> {
    pub(crate) transport: T,
    sequence: u32,
}

impl<T: Transport> Conversation<T> {
    pub(crate) fn new(transport: T) -> Self {
        Conversation { transport, sequence: initial_sequence() }
    }

    /// A fresh sequence number.
    pub(crate) fn next_sequence(&mut self) -> u32 {
        self.reserve_sequences(1)
    }

    /// Reserves `count` consecutive sequence numbers and returns the first.
    pub(crate) fn reserve_sequences(&mut self, count: u32) -> u32 {
        let first = self.sequence.wrapping_add(1);
        self.sequence = self.sequence.wrapping_add(count);
        first
    }

    /// Sends the request `build` makes for a fresh sequence number (it must ask for an ack)
    /// and reads up to the ack, passing each answer before it (a GET answers one) to
    /// `decode`. The kernel's error, or else the first decoding error, is returned.
    pub(crate) fn request<R>(
        &mut self,
        build: impl FnOnce(u32) -> Vec<u8>,
        mut decode: impl FnMut(Message<'_>) -> Result<R, NetlinkError>,
    ) -> Result<Vec<R>, NetlinkError> {
        let sequence = self.next_sequence();
        self.transport.send(&build(sequence))?;
        let mut answers = Vec::new();
        let mut failure = None;
        loop {
            let datagram = receive(&mut self.transport)?;
            for message in messages(datagram) {
                let message = message?;
                if message.seq != sequence {
                    continue; // a late reply to an earlier request, or a notification
                }
                match message.status() {
                    Some(Ok(())) if message.kind == NLMSG_ERROR => {
                        return failure.map_or(Ok(answers), Err);
                    }
                    Some(Ok(())) => {} // NLMSG_DONE of a multi-part answer: the ack follows
                    Some(Err(err)) => return Err(err),
                    None => match decode(message) {
                        Ok(answer) => answers.push(answer),
                        Err(err) => {
                            failure.get_or_insert(err);
                        }
                    },
                }
            }
        }
    }

    /// Runs the dump request `build` makes for a fresh sequence number and returns what
    /// `decode` keeps of its messages. The whole dump is run again when the kernel marks it
    /// interrupted, up to [`MAX_DUMP_ATTEMPTS`] times.
    pub(crate) fn dump<R>(
        &mut self,
        mut build: impl FnMut(u32) -> Vec<u8>,
        mut decode: impl FnMut(Message<'_>) -> Result<Option<R>, NetlinkError>,
    ) -> Result<Vec<R>, NetlinkError> {
        let mut kept = Vec::new();
        for _ in 0..MAX_DUMP_ATTEMPTS {
            kept.clear();
            if !self.dump_once(&mut build, &mut decode, &mut kept)?.interrupted {
                return Ok(kept);
            }
        }
        Err(NetlinkError::DumpInterrupted { attempts: MAX_DUMP_ATTEMPTS })
    }

    fn dump_once<R>(
        &mut self,
        build: &mut impl FnMut(u32) -> Vec<u8>,
        decode: &mut impl FnMut(Message<'_>) -> Result<Option<R>, NetlinkError>,
        kept: &mut Vec<R>,
    ) -> Result<DumpEnd, NetlinkError> {
        let sequence = self.next_sequence();
        self.transport.send(&build(sequence))?;
        let mut interrupted = false;
        // The first failure is remembered but the dump is still read to its end.
        let mut failure: Option<NetlinkError> = None;
        loop {
            let datagram = receive(&mut self.transport)?;
            for message in messages(datagram) {
                let message = match message {
                    Ok(message) => message,
                    Err(err) => {
                        failure.get_or_insert(err);
                        break; // the rest of this datagram cannot be framed
                    }
                };
                if message.seq != sequence {
                    continue;
                }
                interrupted |= message.interrupted();
                match message.status() {
                    // NLMSG_DONE: the end.
                    Some(Ok(())) if message.kind != NLMSG_ERROR => {
                        return failure.map_or(Ok(DumpEnd { interrupted }), Err);
                    }
                    // An ack: the request was not taken as a dump, so nothing else follows.
                    Some(Ok(())) => {
                        return Err(failure.unwrap_or(NetlinkError::Unexpected("ack in a dump".into())))
                    }
                    // An error ends a dump (it is its last message).
                    Some(Err(err)) => return Err(failure.unwrap_or(err)),
                    None => match decode(message) {
                        Ok(Some(item)) => kept.push(item),
                        Ok(None) => {}
                        Err(err) => {
                            failure.get_or_insert(err);
                        }
                    },
                }
            }
        }
    }

    /// Sends a batch of `count` operations already framed in `wire` (begin marker with
    /// `begin_sequence`, operation `i` with `begin_sequence + 1 + i`, end marker; reserve
    /// them with [`Self::reserve_sequences`]) and reads one ack per operation. Other
    /// answers to an operation (an echo) go to `echo` with the operation's index.
    ///
    /// The kernel processes the whole batch while handling the `send`, so once it refused
    /// something all it will say is queued already: from then on nothing is waited for.
    pub(crate) fn batch(
        &mut self,
        wire: &[u8],
        begin_sequence: u32,
        count: usize,
        mut echo: impl FnMut(usize, Message<'_>) -> Result<(), NetlinkError>,
    ) -> Result<(), BatchError> {
        self.transport.send(wire).map_err(|err| BatchError::Failed(err.into()))?;
        let index_of = |sequence: u32| {
            let offset = sequence.wrapping_sub(begin_sequence).wrapping_sub(1) as usize;
            (offset < count).then_some(offset)
        };
        let mut acked = vec![false; count];
        let mut missing = count;
        let mut refused: Option<(usize, NetlinkError)> = None;
        let mut commit_refused: Option<NetlinkError> = None;
        while missing > 0 {
            let wait = if refused.is_none() && commit_refused.is_none() { Wait::Block } else { Wait::No };
            let datagram = match self.transport.recv(wait) {
                Ok(Some(datagram)) => datagram,
                Ok(None) => break,
                Err(err) => return Err(BatchError::Failed(err.into())),
            };
            for message in messages(datagram) {
                let message = message.map_err(BatchError::Failed)?;
                let index = index_of(message.seq);
                if message.kind != NLMSG_ERROR {
                    if let Some(index) = index {
                        echo(index, message).map_err(BatchError::Failed)?;
                    }
                    continue;
                }
                let status = message.status().expect("NLMSG_ERROR has a status");
                if message.seq == begin_sequence {
                    if let Err(err) = status {
                        commit_refused.get_or_insert(err);
                    }
                } else if let Some(index) = index {
                    if !acked[index] {
                        acked[index] = true;
                        missing -= 1;
                    }
                    if let Err(err) = status {
                        // Report the first operation that failed, whatever the reply order.
                        if refused.as_ref().is_none_or(|(first, _)| index < *first) {
                            refused = Some((index, err));
                        }
                    }
                }
            }
        }
        if let Some((index, source)) = refused {
            return Err(BatchError::Operation { index, source });
        }
        if let Some(err) = commit_refused {
            return Err(BatchError::Commit(err));
        }
        if missing > 0 {
            return Err(BatchError::MissingAcks(missing));
        }
        Ok(())
    }
}

struct DumpEnd {
    interrupted: bool,
}

/// One datagram; the socket's receive timeout running out is an error here.
fn receive<T: Transport>(transport: &mut T) -> Result<&[u8], NetlinkError> {
    match transport.recv(Wait::Block)? {
        Some(datagram) => Ok(datagram),
        None => Err(NetlinkError::Io(io::ErrorKind::TimedOut.into())),
    }
}

/// Sequence numbers start somewhere unpredictable, so that replies meant for an earlier
/// user of a descriptor number are unlikely to match. Read from the vDSO clock: no syscall.
fn initial_sequence() -> u32 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(1);
    now.wrapping_mul(2_654_435_761)
}
