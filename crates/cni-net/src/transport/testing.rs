//! Synthetic kernel replies and a scripted fake kernel, for testing conversations without a
//! socket.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

use super::message::{HEADER_LEN, NLMSG_DONE, NLMSG_ERROR, NLM_F_ACK_TLVS, NLM_F_CAPPED};
use super::{Transport, Wait};

/// `NLMSGERR_ATTR_MSG`.
const NLMSGERR_ATTR_MSG: u16 = 1;

pub(crate) fn header(length: usize, kind: u16, flags: u16, sequence: u32) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(length);
    bytes.extend_from_slice(&(length as u32).to_ne_bytes());
    bytes.extend_from_slice(&kind.to_ne_bytes());
    bytes.extend_from_slice(&flags.to_ne_bytes());
    bytes.extend_from_slice(&sequence.to_ne_bytes());
    bytes.extend_from_slice(&0u32.to_ne_bytes());
    bytes
}

/// `NLMSG_ERROR` with `errno` (0 = ack) and an optional extended-ack message, capped.
pub(crate) fn error(sequence: u32, errno: i32, text: Option<&str>) -> Vec<u8> {
    let mut body = (-errno).to_ne_bytes().to_vec();
    body.extend(header(HEADER_LEN, 16, 0, sequence)); // the capped echoed request
    let mut flags = NLM_F_CAPPED;
    if let Some(text) = text {
        flags |= NLM_F_ACK_TLVS;
        let mut value = text.as_bytes().to_vec();
        value.push(0);
        body.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        body.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        body.extend(&value);
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
    }
    let mut bytes = header(HEADER_LEN + body.len(), NLMSG_ERROR, flags, sequence);
    bytes.extend(body);
    bytes
}

pub(crate) fn done(sequence: u32, flags: u16) -> Vec<u8> {
    let mut bytes = header(HEADER_LEN + 4, NLMSG_DONE, flags, sequence);
    bytes.extend_from_slice(&0i32.to_ne_bytes());
    bytes
}

/// A message of type `kind` whose body is `body`.
pub(crate) fn message(kind: u16, flags: u16, sequence: u32, body: &[u8]) -> Vec<u8> {
    let mut bytes = header(HEADER_LEN + body.len(), kind, flags, sequence);
    bytes.extend_from_slice(body);
    while !bytes.len().is_multiple_of(4) {
        bytes.push(0);
    }
    bytes
}

/// One scripted answer per send: built from the sequence number of the first message sent,
/// a list of datagrams.
pub(crate) type Script = Box<dyn FnMut(u32) -> Vec<Vec<u8>> + Send>;

/// Replays a script; counts the sends.
pub(crate) struct FakeKernel {
    answers: VecDeque<Script>,
    pending: VecDeque<Vec<u8>>,
    current: Vec<u8>,
    pub(crate) sends: Arc<Mutex<u32>>,
}

impl FakeKernel {
    pub(crate) fn new(answers: Vec<Script>) -> FakeKernel {
        FakeKernel {
            answers: answers.into(),
            pending: VecDeque::new(),
            current: Vec::new(),
            sends: Arc::new(Mutex::new(0)),
        }
    }
}

impl Transport for FakeKernel {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let sequence = u32::from_ne_bytes(bytes[8..12].try_into().unwrap());
        *self.sends.lock().unwrap() += 1;
        let mut answer = self.answers.pop_front().expect("unexpected extra request");
        self.pending.extend(answer(sequence));
        Ok(())
    }

    fn recv(&mut self, wait: Wait) -> io::Result<Option<&[u8]>> {
        match self.pending.pop_front() {
            Some(datagram) => {
                self.current = datagram;
                Ok(Some(&self.current))
            }
            None if wait == Wait::No => Ok(None),
            None => panic!("read past the script"),
        }
    }
}
