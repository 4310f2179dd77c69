//! Issue 26 item 1: a batch ended the wrong way never strands an open batch. pkv keeps a batch
//! open when its end or commit fails; so does the binding, which gives it back to abort or
//! commit, and a batch dropped without commit is aborted. After each, `step()` works again.
mod common;

use pkv::{Engine, Request, StepBatch};

/// An engine with two requests waiting: 9 and 5 prompt tokens, 3 new tokens each.
fn engine_with_requests() -> Engine {
    let e = common::engine(4, 32);
    let r = Request { max_new_tokens: 3, ..Request::default() };
    e.submit(&common::tokens(0, 9), &r).unwrap();
    e.submit(&common::tokens(50, 5), &r).unwrap();
    e
}

fn run_attention(batch: &mut StepBatch<'_>) {
    let n = batch.num_tokens();
    let (q, kv, mut out) = (vec![0.1f32; n * 64], vec![0.2f32; n * 32], vec![0f32; n * 64]);
    for layer in 0..2 {
        batch.attention(layer, &q, &kv, &kv, &mut out).unwrap();
    }
}

/// The step's plan, to compare a step planned again after an abort with the first one.
fn plan(batch: &StepBatch<'_>) -> (Vec<u64>, Vec<i32>) {
    let v = batch.view();
    (v.seq_ids.to_vec(), v.positions.to_vec())
}

/// Every later step works: the requests run to the end.
fn finish(e: &Engine) {
    let mut steps = 0;
    while let Some(mut batch) = e.step().expect("step after the batch was ended") {
        run_attention(&mut batch);
        let tokens = vec![1; batch.view().num_seqs as usize];
        batch.commit(&tokens).unwrap();
        steps += 1;
        assert!(steps < 10, "the scheduler does not finish");
    }
    assert_eq!(e.drain_finished().unwrap().len(), 2);
    e.check().unwrap();
}

/// The sequence: submit, step, end. `StepBatch` has no `end` (a compile_fail doctest
/// of batch.rs), so the end goes through pkv-sys, as a C host would call it: pkv refuses it
/// and keeps the batch, the binding still holds it, and commit then ends it.
#[test]
fn end_on_a_scheduler_batch_is_refused_and_the_batch_stays_usable() {
    let e = engine_with_requests();
    let mut batch = e.step().unwrap().expect("a batch");
    let raw = e.library().raw();
    // SAFETY: the batch is open; pkv_batch_end only reads the handle.
    let status = unsafe { (raw.pkv_batch_end.as_ref().unwrap())(batch.as_raw()) };
    assert_eq!(status, pkv::sys::PKV_ERR_STATE);
    let message = unsafe { std::ffi::CStr::from_ptr(raw.pkv_last_error()) }.to_string_lossy().into_owned();
    assert!(message.contains("pkv_commit"), "{:?}", message);
    // pkv's own refusal of a commit keeps it open too: NULL tokens for a step that samples.
    let status = unsafe { (raw.pkv_commit.as_ref().unwrap())(batch.as_raw(), std::ptr::null()) };
    assert_eq!(status, pkv::sys::PKV_ERR_INVALID_ARGUMENT);
    assert!(e.step().is_err(), "the batch is still open");
    run_attention(&mut batch);
    batch.commit(&[1, 1]).unwrap();
    finish(&e);
}

#[test]
fn a_refused_commit_gives_the_batch_back_to_commit_again() {
    let e = engine_with_requests();
    let mut batch = e.step().unwrap().unwrap();
    run_attention(&mut batch);
    let ids = batch.view().seq_ids.to_vec();
    let err = batch.commit(&[]).expect_err("the step samples two tokens");
    assert_eq!(err.status(), pkv::Status::InvalidArgument);
    assert!(err.error().message().contains("2 expected"), "{}", err);
    assert!(err.to_string().contains("still open"), "{}", err);
    let batch = err.into_batch();
    batch.commit(&[7, 8]).unwrap();
    assert_eq!(e.tokens(pkv::Seq(ids[0])).unwrap().last(), Some(&7));
    assert_eq!(e.tokens(pkv::Seq(ids[1])).unwrap().last(), Some(&8));
    finish(&e);
}

#[test]
fn a_refused_commit_given_back_can_be_aborted() {
    let e = engine_with_requests();
    let batch = e.step().unwrap().unwrap();
    let first = plan(&batch);
    let (error, batch) = batch.commit(&[1]).unwrap_err().into_parts();
    assert_eq!(error.status(), pkv::Status::InvalidArgument);
    batch.abort();
    let again = e.step().unwrap().expect("the aborted step is planned again");
    assert_eq!(plan(&again), first);
    drop(again);
    finish(&e);
}

/// `?` turns a failed commit into a `pkv::Error`: the batch inside is dropped, so aborted.
fn commit_with_question_mark(e: &Engine) -> pkv::Result<()> {
    let batch = e.step()?.expect("a batch");
    batch.commit(&[])?;
    Ok(())
}

#[test]
fn a_scheduler_batch_dropped_without_commit_is_aborted() {
    let e = engine_with_requests();
    let first = plan(&e.step().unwrap().unwrap()); // dropped at once
    let batch = e.step().expect("step after a dropped batch").unwrap();
    assert_eq!(plan(&batch), first);
    drop(batch);
    let err = commit_with_question_mark(&e).unwrap_err();
    assert_eq!(err.status(), pkv::Status::InvalidArgument);
    let batch = e.step().expect("step after an error dropped its batch").unwrap();
    assert_eq!(plan(&batch), first);
    assert_eq!(e.stats().unwrap().num_running_requests, 2);
    batch.abort();
    finish(&e);
}

/// A batch of `Engine::batch` keeps the same rules: dropping it aborts it, `end` ends it.
#[test]
fn a_begun_batch_dropped_or_ended() {
    let e = common::engine(4, 16);
    let a = e.allocate(&common::tokens(0, 6), None).unwrap();
    drop(e.batch(&[a.seq], None).unwrap());
    assert_eq!(e.seq_info(a.seq).unwrap().num_computed_tokens, 0);
    let batch = e.batch(&[a.seq], None).expect("begin after a dropped batch");
    batch.end().unwrap();
    assert_eq!(e.seq_info(a.seq).unwrap().num_computed_tokens, 6);
    e.check().unwrap();
}
