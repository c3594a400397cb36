//! The nftables client: commits batches and reads back tables, chains and rules.

use super::attr::AttrWriter;
use super::batch::Batch;
use super::chain::{encode_chain_name, ChainInfo};
use super::data::Family;
use super::error::NftError;
use super::msg::{nft_type, put_message, Incoming};
use super::rule::{encode_chain_filter, ListedRule};
use super::socket::{decode_failure, NetfilterConversation};
use super::sys::*;
use super::table::{encode_table_name, TableInfo};
use crate::error::NetlinkError;
use crate::transport::{BatchError, Message};
use crate::Idempotent;
use std::sync::atomic::{AtomicBool, Ordering};

/// Receive-buffer room per batch operation: the kernel's accounting of one ACK plus one
/// echoed rule, when the batch asks for echoes (a 20 000-rule batch is tested to fit).
const ANSWER_BYTES_PER_OPERATION: usize = 2048;

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
/// thread was in).
#[derive(Debug)]
pub struct NftClient {
    sock: NetfilterConversation,
}

/// Whether a commit of this process deleted anything (see [`NftClient::close_without_waiting`]).
/// Process-wide, not per client: the flush a socket's release waits for is of everyone's
/// deletions, so a client that only looked (a DEL's probe after its own deleting commit)
/// would pay for the deleting client's destruction if it closed at once.
static DELETED_IN_THIS_PROCESS: AtomicBool = AtomicBool::new(false);

impl NftClient {
    /// Opens a client for the calling thread's current network namespace.
    pub fn new() -> Result<Self, NftError> {
        Ok(Self { sock: NetfilterConversation::open()? })
    }

    /// Closes the client without making this process wait for the kernel's cleanup.
    ///
    /// Releasing the last reference to an nfnetlink socket makes the kernel flush the
    /// deferred destruction of earlier nf_tables commits (anyone's), which waits for an RCU
    /// grace period: 6–18 ms measured here, per plugin, on every DEL. The commits have
    /// already taken effect; only memory reclaim is pending. So a detached helper process
    /// takes the last reference: it waits (on a pipe) until this process has dropped its
    /// own, then releases the socket in the background — if any commit of this process
    /// deleted anything (through this client or another: the release flushes them all),
    /// together with every other plugin's at the next 100 ms tick (the release holds the
    /// commit mutex; see `cni_os::detach`), else at once — and exits. It keeps no other
    /// descriptor (no stdout pipe, no lock) and shares this process's memory, so
    /// starting it costs one `clone` and no wait. Meant for short-lived callers such as
    /// plugins, and only in a program that called
    /// [`cni_os::detach::enable_helper_processes`]; without that, or if the helper cannot be
    /// started, the socket is closed here, the slow way.
    pub fn close_without_waiting(self) {
        let on_tick = DELETED_IN_THIS_PROCESS.load(Ordering::Relaxed);
        let tail = cni_os::detach::Tail::CloseAfterCaller { on_tick };
        let handoff = cni_os::detach::detach(self.sock.fd(), tail);
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
        // Sequence numbers: the begin marker, each operation, the end marker.
        let begin_seq = self.sock.conversation.reserve_sequences(count as u32 + 2);
        let wire = batch.encode(begin_seq);
        // Each operation is answered with an ACK, rules also with their echo if the batch
        // asked for one; all of it is queued before we read, so the receive buffer must
        // hold it (ENOBUFS otherwise).
        self.sock.make_room(wire.len() + count * ANSWER_BYTES_PER_OPERATION)?;
        let mut handles = vec![None; count];
        let outcome = self.sock.conversation.batch(&wire, begin_seq, count, |index, message| {
            // The echo of a new rule carries its handle.
            if message.kind == nft_type(NFT_MSG_NEWRULE) {
                handles[index] = Some(ListedRule::decode(&message.into()).map_err(decode_failure)?.handle);
            }
            Ok(())
        });
        match outcome {
            Ok(()) => {}
            Err(BatchError::Operation { index, source }) => {
                let (errno, message) = kernel_refusal(source);
                let operation = batch.ops[index].description.clone();
                return Err(NftError::Operation { index, operation, errno, message });
            }
            Err(BatchError::Commit(source)) => {
                let (errno, message) = kernel_refusal(source);
                return Err(NftError::Commit { errno, message });
            }
            Err(BatchError::MissingAcks(missing)) => return Err(NftError::MissingAck { missing }),
            Err(BatchError::Failed(NetlinkError::Io(err))) if err.raw_os_error() == Some(libc::ENOBUFS) => {
                return Err(NftError::AnswersLost);
            }
            Err(BatchError::Failed(err)) => return Err(NftError::from_netlink("commit", err)),
        }
        if batch.removes_anything() {
            DELETED_IN_THIS_PROCESS.store(true, Ordering::Relaxed);
        }
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
        self.dump(NFT_MSG_GETRULE, family, &w.buf, &what, |message| {
            let listed = ListedRule::decode(&message)?;
            // Should a kernel ignore the dump filter, keep only the asked-for chain anyway.
            Ok((listed.rule.table == table && listed.rule.chain == chain).then_some(listed))
        })
    }

    /// The chains of one table.
    pub fn list_chains(&mut self, family: Family, table: &str) -> Result<Vec<ChainInfo>, NftError> {
        let mut w = AttrWriter::new();
        w.put_str(NFTA_CHAIN_TABLE, table);
        let what = format!("list chains {} {table}", family.nft_name());
        self.dump(NFT_MSG_GETCHAIN, family, &w.buf, &what, |message| {
            let info = ChainInfo::decode(&message)?;
            // Older kernels ignore the table filter of a chain dump: filter here too.
            Ok((info.table == table).then_some(info))
        })
    }

    /// The table, if it exists.
    pub fn get_table(&mut self, family: Family, name: &str) -> Result<Option<TableInfo>, NftError> {
        let mut w = AttrWriter::new();
        encode_table_name(&mut w, name);
        let what = format!("get table {} {name}", family.nft_name());
        self.get_one(NFT_MSG_GETTABLE, family, &w.buf, &what, |message| TableInfo::decode(&message.into()))
    }

    /// The chain, if it exists: one request answered for that chain alone, so asking
    /// costs the same however many chains and rules the table holds. A missing table is
    /// a missing chain.
    pub fn get_chain(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<Option<ChainInfo>, NftError> {
        let mut w = AttrWriter::new();
        encode_chain_name(&mut w, table, chain);
        let what = format!("get chain {} {table} {chain}", family.nft_name());
        self.get_one(NFT_MSG_GETCHAIN, family, &w.buf, &what, |message| ChainInfo::decode(&message.into()))
    }

    /// The ruleset's generation: the kernel counts every committed transaction in the
    /// namespace, so two readings tell how many batches were committed between them.
    pub fn generation(&mut self) -> Result<u32, NftError> {
        let msg_type = nft_type(NFT_MSG_GETGEN);
        let answers = self.sock.conversation.request(
            |seq| {
                let mut out = Vec::new();
                put_message(&mut out, msg_type, NLM_F_REQUEST | NLM_F_ACK, seq, 0, 0, &[]);
                out
            },
            |message| {
                let incoming = Incoming::from(message);
                for attr in incoming.attrs() {
                    let attr = attr.map_err(decode_failure)?;
                    if attr.kind == NFTA_GEN_ID {
                        return attr.u32().map_err(decode_failure);
                    }
                }
                Err(decode_failure(NftError::Malformed("generation answer without NFTA_GEN_ID".into())))
            },
        );
        let answers = answers.map_err(|err| NftError::from_netlink("get generation", err))?;
        answers.into_iter().next().ok_or_else(|| NftError::Malformed("no generation answer".into()))
    }

    /// One object asked for by name (`attributes`): what `decode` makes of the kernel's
    /// answer, or None when the kernel says there is no such object.
    fn get_one<T>(
        &mut self,
        msg: u16,
        family: Family,
        attributes: &[u8],
        what: &str,
        decode: impl Fn(Message) -> Result<T, NftError>,
    ) -> Result<Option<T>, NftError> {
        let (msg_type, flags) = (nft_type(msg), NLM_F_REQUEST | NLM_F_ACK);
        let answers = self.sock.conversation.request(
            |seq| {
                let mut out = Vec::new();
                put_message(&mut out, msg_type, flags, seq, family.byte(), 0, attributes);
                out
            },
            |message| decode(message).map_err(decode_failure),
        );
        let found = answers.map_err(|err| NftError::from_netlink(what, err)).ignore_missing()?;
        Ok(found.and_then(|found| found.into_iter().next()))
    }

    /// Runs a dump request and returns what `decode` keeps of each answer. A dump that the
    /// kernel marks as interrupted (the ruleset changed meanwhile) is run again.
    fn dump<R>(
        &mut self,
        msg: u16,
        family: Family,
        attrs: &[u8],
        what: &str,
        mut decode: impl FnMut(Incoming<'_>) -> Result<Option<R>, NftError>,
    ) -> Result<Vec<R>, NftError> {
        self.sock
            .conversation
            .dump(
                |seq| {
                    let mut out = Vec::new();
                    put_message(
                        &mut out,
                        nft_type(msg),
                        NLM_F_REQUEST | NLM_F_DUMP,
                        seq,
                        family.byte(),
                        0,
                        attrs,
                    );
                    out
                },
                |message: Message<'_>| decode(message.into()).map_err(decode_failure),
            )
            .map_err(|err| NftError::from_netlink(what, err))
    }
}

/// The errno and text of a kernel refusal (a socket failure has no text).
fn kernel_refusal(error: NetlinkError) -> (i32, Option<String>) {
    match error {
        NetlinkError::Kernel { errno, message } => (errno, message),
        other => (other.errno().unwrap_or(libc::EIO), Some(other.to_string())),
    }
}
