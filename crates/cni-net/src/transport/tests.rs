//! The shared loop against a scripted fake kernel: acks, errors, draining, DUMP_INTR
//! retries, multi-part dumps and batches.

use super::conversation::MAX_DUMP_ATTEMPTS;
use super::message::{NLM_F_DUMP_INTR, NLM_F_MULTIPART};
use super::testing::{done, error, message, FakeKernel, Script};
use super::{BatchError, Conversation, Message};
use crate::error::NetlinkError;

/// A protocol message type the loop knows nothing about.
const ANSWER: u16 = 100;

fn conversation(answers: Vec<Script>) -> (Conversation<FakeKernel>, std::sync::Arc<std::sync::Mutex<u32>>) {
    let kernel = FakeKernel::new(answers);
    let sends = kernel.sends.clone();
    (Conversation::new(kernel), sends)
}

fn answer(text: &str, flags: u16, sequence: u32) -> Vec<u8> {
    message(ANSWER, flags, sequence, text.as_bytes())
}

/// The request the loop sends: only its sequence number matters to the fake.
fn request(sequence: u32) -> Vec<u8> {
    message(ANSWER, 0, sequence, &[])
}

fn text(message: Message<'_>) -> Result<Option<String>, NetlinkError> {
    Ok(Some(String::from_utf8_lossy(message.payload()).trim_end_matches('\0').to_string()))
}

#[test]
fn interrupted_dump_is_retried_and_fully_drained() {
    let (mut conversation, sends) = conversation(vec![
        // First attempt: interrupted, spread over two datagrams which must both be read.
        Box::new(|seq| {
            vec![
                answer("stale", NLM_F_MULTIPART | NLM_F_DUMP_INTR, seq),
                done(seq, NLM_F_MULTIPART | NLM_F_DUMP_INTR),
            ]
        }),
        // Second attempt: multi-part over two datagrams, two messages in the first.
        Box::new(|seq| {
            let mut first = answer("lo", NLM_F_MULTIPART, seq);
            first.extend(answer("cnt0", NLM_F_MULTIPART, seq));
            vec![first, answer("cnt1", NLM_F_MULTIPART, seq), done(seq, NLM_F_MULTIPART)]
        }),
        // A following request must see only its own ack.
        Box::new(|seq| vec![error(seq, 0, None)]),
    ]);
    let names = conversation.dump(request, text).unwrap();
    assert_eq!(names, ["lo", "cnt0", "cnt1"]);
    assert_eq!(*sends.lock().unwrap(), 2);
    conversation.request(request, |_| Ok(())).unwrap();
    assert_eq!(*sends.lock().unwrap(), 3);
}

#[test]
fn dump_gives_up_after_repeated_interruptions() {
    let answers: Vec<Script> = (0..MAX_DUMP_ATTEMPTS)
        .map(|_| -> Script { Box::new(|seq| vec![done(seq, NLM_F_DUMP_INTR)]) })
        .collect();
    let (mut conversation, sends) = conversation(answers);
    let err = conversation.dump(request, text).unwrap_err();
    assert!(matches!(err, NetlinkError::DumpInterrupted { .. }), "{err}");
    assert_eq!(*sends.lock().unwrap(), MAX_DUMP_ATTEMPTS);
}

#[test]
fn dump_decode_failure_is_reported_after_draining() {
    let (mut conversation, _) = conversation(vec![
        Box::new(|seq| {
            vec![answer("bad", NLM_F_MULTIPART, seq), answer("ok", NLM_F_MULTIPART, seq), done(seq, 0)]
        }),
        Box::new(|seq| vec![error(seq, 0, None)]),
    ]);
    let err = conversation
        .dump(request, |m| {
            if m.payload().starts_with(b"bad") {
                Err(NetlinkError::Decode("bad".into()))
            } else {
                text(m)
            }
        })
        .unwrap_err();
    assert!(matches!(err, NetlinkError::Decode(_)), "{err}");
    // Nothing of the dump is left for the next request.
    conversation.request(request, |_| Ok(())).unwrap();
}

#[test]
fn dump_error_keeps_errno_and_text() {
    let (mut conversation, _) =
        conversation(vec![Box::new(|seq| vec![error(seq, libc::EOPNOTSUPP, Some("no dump here"))])]);
    match conversation.dump(request, text).unwrap_err() {
        NetlinkError::Kernel { errno, message } => {
            assert_eq!(errno, libc::EOPNOTSUPP);
            assert_eq!(message.as_deref(), Some("no dump here"));
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn stale_replies_are_skipped_and_errno_kept() {
    let (mut conversation, _) = conversation(vec![Box::new(|seq| {
        // A leftover ack of an older request, then our error.
        vec![error(seq.wrapping_sub(5), 0, None), error(seq, libc::ENODEV, None)]
    })]);
    let err = conversation.request(request, |_| Ok(())).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENODEV));
}

#[test]
fn request_returns_the_answers_before_the_ack() {
    let (mut conversation, _) = conversation(vec![Box::new(|seq| {
        let mut datagram = answer("eth0", 0, seq);
        datagram.extend(error(seq, 0, None));
        vec![datagram]
    })]);
    let answers = conversation.request(request, |m| text(m).map(Option::unwrap)).unwrap();
    assert_eq!(answers, ["eth0"]);
}

/// A batch of `count` operations; the fake answers by the begin marker's sequence number.
fn run_batch(count: usize, answers: Script) -> (Result<(), BatchError>, Vec<(usize, String)>) {
    let (mut conversation, _) = conversation(vec![answers]);
    let begin = conversation.reserve_sequences(count as u32 + 2);
    let mut echoes = Vec::new();
    let outcome = conversation.batch(&request(begin), begin, count, |index, message| {
        echoes.push((index, text(message)?.unwrap()));
        Ok(())
    });
    (outcome, echoes)
}

#[test]
fn batch_reads_one_ack_per_operation_and_echoes() {
    let (outcome, echoes) = run_batch(
        3,
        Box::new(|begin| {
            let mut first = answer("rule", 0, begin + 2);
            first.extend(error(begin + 1, 0, None));
            first.extend(error(begin + 2, 0, None));
            vec![first, error(begin + 3, 0, None)]
        }),
    );
    outcome.unwrap();
    assert_eq!(echoes, [(1, "rule".to_string())]);
}

#[test]
fn batch_reports_the_first_refused_operation_without_waiting_for_the_rest() {
    let (outcome, _) = run_batch(
        4,
        Box::new(|begin| {
            // Operation 2 refused and reported before operation 1; 3 is never answered
            // (the kernel stops at the first error it cannot get past).
            vec![
                error(begin + 3, libc::ENOENT, Some("no such chain")),
                error(begin + 2, libc::EEXIST, None),
                error(begin + 1, 0, None),
            ]
        }),
    );
    match outcome {
        Err(BatchError::Operation { index: 1, source: NetlinkError::Kernel { errno, .. } }) => {
            assert_eq!(errno, libc::EEXIST)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn batch_refused_as_a_whole() {
    let (outcome, _) = run_batch(1, Box::new(|begin| vec![error(begin, libc::EPERM, None)]));
    assert!(matches!(outcome, Err(BatchError::Commit(NetlinkError::Kernel { errno: libc::EPERM, .. }))));
}
