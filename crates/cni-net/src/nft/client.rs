//! The nftables client: commits batches and reads back tables, chains and rules.

use super::attr::AttrWriter;
use super::batch::Batch;
use super::chain::ChainInfo;
use super::data::Family;
use super::error::NftError;
use super::msg::{nft_type, put_message, split_messages, Incoming};
use super::rule::{encode_chain_filter, ListedRule};
use super::socket::NetfilterSocket;
use super::sys::*;
use super::table::{encode_table_name, TableInfo};

/// Receive-buffer room per batch operation: the kernel's accounting of one ACK plus one
/// echoed rule (a 20 000-rule batch is tested to fit).
const ANSWER_BYTES_PER_OPERATION: usize = 2048;
/// How often a dump is retried when the ruleset changed while it was being read.
const DUMP_ATTEMPTS: usize = 8;

/// What a successful commit reports back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitOutcome {
    handles: Vec<Option<u64>>,
}

impl CommitOutcome {
    /// The kernel handle of the rule created by operation `index` of the batch.
    pub fn rule_handle(&self, index: usize) -> Option<u64> {
        self.handles.get(index).copied().flatten()
    }
}

/// A synchronous nf_tables client bound to one network namespace (the one the creating
/// thread was in; see [`NetfilterSocket`]).
#[derive(Debug)]
pub struct NftClient {
    sock: NetfilterSocket,
    /// Whether a commit through this client deleted anything (see [`Self::close_without_waiting`]).
    removed: bool,
}

impl NftClient {
    /// Opens a client for the calling thread's current network namespace.
    pub fn new() -> Result<Self, NftError> {
        Ok(Self { sock: NetfilterSocket::open()?, removed: false })
    }

    /// Closes the client without making this process wait for the kernel's cleanup.
    ///
    /// Releasing the last reference to an nfnetlink socket makes the kernel flush the
    /// deferred destruction of earlier nf_tables commits (anyone's), which waits for an RCU
    /// grace period: 6–18 ms measured here, per plugin, on every DEL. The commits have
    /// already taken effect; only memory reclaim is pending. So a detached helper process
    /// takes the last reference: it waits (on a pipe) until this process has dropped its
    /// own, then releases the socket in the background — if this client's commits deleted
    /// anything, together with every other plugin's at the next 100 ms tick (the release
    /// holds the commit mutex; see `crate::detach`), else at once — and exits. It keeps no
    /// other descriptor (no stdout pipe, no lock) and shares this process's memory, so
    /// starting it costs one `clone` and no wait. Meant for short-lived callers such as
    /// plugins, and only in a program that called
    /// [`crate::detach::enable_helper_processes`]; without that, or if the helper cannot be
    /// started, the socket is closed here, the slow way.
    pub fn close_without_waiting(self) {
        let tail = crate::detach::Tail::CloseAfterCaller { on_tick: self.removed };
        let handoff = crate::detach::detach(self.sock.raw_fd(), tail);
        // Our reference goes first; then the handoff releases the helper, whose
        // reference is the last.
        drop(self);
        drop(handoff);
    }

    /// Applies every operation of `batch` atomically: either all take effect or none.
    ///
    /// On failure the error names the first operation the kernel refused and its errno.
    pub fn commit(&mut self, batch: &Batch) -> Result<CommitOutcome, NftError> {
        let count = batch.ops.len();
        if count == 0 {
            return Ok(CommitOutcome::default());
        }
        let begin_seq = self.sock.seq();
        // Reserve the sequence numbers of the operations and the end marker.
        for _ in 0..=count {
            self.sock.seq();
        }
        let wire = batch.encode(begin_seq);
        // Each operation is answered with an ACK, rules also with their echo; all of it
        // is queued before we read, so the receive buffer must hold it (ENOBUFS otherwise).
        self.sock.grow_buffers(wire.len() + count * ANSWER_BYTES_PER_OPERATION)?;
        self.sock.send(&wire)?;

        let mut acked = vec![false; count];
        let mut handles = vec![None; count];
        let mut missing = count;
        let mut first_failure: Option<(usize, i32)> = None;
        let mut commit_errno = None;
        while missing > 0 {
            // The kernel answers a batch while processing our send, so once it has
            // refused something everything it will say is already queued: do not wait.
            let wait = first_failure.is_none() && commit_errno.is_none();
            let datagram = match self.sock.recv(wait) {
                Ok(Some(datagram)) => datagram,
                Ok(None) => break,
                Err(NftError::Io(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    return Err(NftError::AnswersLost);
                }
                Err(e) => return Err(e),
            };
            for msg in split_messages(datagram)? {
                let op_index = |seq: u32| {
                    let offset = seq.wrapping_sub(begin_seq).wrapping_sub(1) as usize;
                    (offset < count).then_some(offset)
                };
                if let Some(ack) = msg.ack()? {
                    if ack.request_seq == begin_seq && ack.errno != 0 {
                        commit_errno = Some(ack.errno);
                    } else if let Some(i) = op_index(ack.request_seq) {
                        if !acked[i] {
                            acked[i] = true;
                            missing -= 1;
                        }
                        if ack.errno != 0 && first_failure.is_none_or(|(j, _)| i < j) {
                            first_failure = Some((i, ack.errno));
                        }
                    }
                } else if msg.msg_type == nft_type(NFT_MSG_NEWRULE) {
                    if let Some(i) = op_index(msg.seq) {
                        handles[i] = Some(ListedRule::decode(&msg)?.handle);
                    }
                }
            }
        }
        if let Some((index, errno)) = first_failure {
            return Err(NftError::Operation {
                index,
                operation: batch.ops[index].description.clone(),
                errno,
            });
        }
        if let Some(errno) = commit_errno {
            return Err(NftError::Commit { errno });
        }
        if missing > 0 {
            return Err(NftError::MissingAck { missing });
        }
        self.removed |= batch.removes_anything();
        Ok(CommitOutcome { handles })
    }

    /// The rules of one chain, in order, with handles, expressions and comments. Only
    /// that chain is read, so the cost does not grow with the rest of the ruleset. A chain
    /// or table that does not exist yields an empty list.
    pub fn list_rules(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<Vec<ListedRule>, NftError> {
        let mut w = AttrWriter::new();
        encode_chain_filter(&mut w, table, chain);
        let what = format!("list rules {} {table} {chain}", family.nft_name());
        let msgs = self.dump(NFT_MSG_GETRULE, family, &w.buf, &what)?;
        let mut rules = Vec::new();
        for m in &msgs {
            let listed = ListedRule::decode(&split_messages(m)?[0])?;
            // Should a kernel ignore the dump filter, keep only the asked-for chain anyway.
            if listed.rule.table == table && listed.rule.chain == chain {
                rules.push(listed);
            }
        }
        Ok(rules)
    }

    /// The chains of one table.
    pub fn list_chains(&mut self, family: Family, table: &str) -> Result<Vec<ChainInfo>, NftError> {
        let mut w = AttrWriter::new();
        w.put_str(NFTA_CHAIN_TABLE, table);
        let what = format!("list chains {} {table}", family.nft_name());
        let msgs = self.dump(NFT_MSG_GETCHAIN, family, &w.buf, &what)?;
        let mut chains = Vec::new();
        for m in &msgs {
            let info = ChainInfo::decode(&split_messages(m)?[0])?;
            // Older kernels ignore the table filter of a chain dump: filter here too.
            if info.table == table {
                chains.push(info);
            }
        }
        Ok(chains)
    }

    /// The table, if it exists.
    pub fn get_table(&mut self, family: Family, name: &str) -> Result<Option<TableInfo>, NftError> {
        let mut w = AttrWriter::new();
        encode_table_name(&mut w, name);
        let seq = self.sock.seq();
        let mut out = Vec::new();
        let msg_type = nft_type(NFT_MSG_GETTABLE);
        put_message(&mut out, msg_type, NLM_F_REQUEST | NLM_F_ACK, seq, family.byte(), 0, &w.buf);
        self.sock.send(&out)?;
        let mut found = None;
        loop {
            let Some(datagram) = self.sock.recv(true)? else {
                return Err(NftError::MissingAck { missing: 1 });
            };
            for msg in split_messages(datagram)? {
                if msg.seq != seq {
                    continue;
                }
                match msg.ack()? {
                    Some(ack) if ack.errno == libc::ENOENT => return Ok(None),
                    Some(ack) if ack.errno != 0 => {
                        return Err(NftError::Request {
                            request: format!("get table {} {name}", family.nft_name()),
                            errno: ack.errno,
                        })
                    }
                    Some(_) => return Ok(found),
                    None => found = Some(TableInfo::decode(&msg)?),
                }
            }
        }
    }

    /// Runs a dump request and returns each answer message as owned bytes. A dump that
    /// the kernel marks as interrupted (the ruleset changed meanwhile) is retried.
    fn dump(&mut self, msg: u16, family: Family, attrs: &[u8], what: &str) -> Result<Vec<Vec<u8>>, NftError> {
        for _ in 0..DUMP_ATTEMPTS {
            let seq = self.sock.seq();
            let mut out = Vec::new();
            let flags = NLM_F_REQUEST | NLM_F_DUMP;
            put_message(&mut out, nft_type(msg), flags, seq, family.byte(), 0, attrs);
            self.sock.send(&out)?;
            let (msgs, interrupted) = self.collect_dump(seq, what)?;
            if !interrupted {
                return Ok(msgs);
            }
        }
        Err(NftError::Request { request: what.to_string(), errno: libc::EINTR })
    }

    fn collect_dump(&mut self, seq: u32, what: &str) -> Result<(Vec<Vec<u8>>, bool), NftError> {
        let mut msgs = Vec::new();
        let mut interrupted = false;
        loop {
            let Some(datagram) = self.sock.recv(true)? else {
                return Err(NftError::MissingAck { missing: 1 });
            };
            for msg in split_messages(datagram)? {
                if msg.seq != seq {
                    continue;
                }
                interrupted |= msg.flags & NLM_F_DUMP_INTR != 0;
                if msg.msg_type == NLMSG_DONE {
                    return Ok((msgs, interrupted));
                }
                if let Some(ack) = msg.ack()? {
                    if ack.errno != 0 {
                        return Err(NftError::Request { request: what.to_string(), errno: ack.errno });
                    }
                    continue;
                }
                msgs.push(own_message(&msg));
            }
        }
    }
}

/// Re-frames a borrowed message as standalone bytes, so it outlives the receive buffer.
fn own_message(msg: &Incoming<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(NLMSG_HDRLEN + msg.payload.len());
    out.extend_from_slice(&((NLMSG_HDRLEN + msg.payload.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&msg.msg_type.to_ne_bytes());
    out.extend_from_slice(&msg.flags.to_ne_bytes());
    out.extend_from_slice(&msg.seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(msg.payload);
    out
}
