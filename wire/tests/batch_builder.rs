//! What the batch builder refuses: a client's mistakes surface as a [`BuildError`] when the
//! batch is built, never as a batch every broker later rejects.

use floe_wire::batch::{BuildError, NO_PRODUCER_ID, NO_SEQUENCE};
use floe_wire::{BatchBuilder, RecordBatch};

fn one_record_with_producer(
    producer_id: i64,
    base_sequence: i32,
) -> Result<RecordBatch, BuildError> {
    let mut builder = BatchBuilder::new(1 << 10);
    builder.producer(producer_id, 0, base_sequence);
    builder
        .push(1_700_000_000_000, None, b"v", &[])
        .expect("record fits");
    let bytes = builder.finish()?;
    Ok(RecordBatch::decode(bytes).expect("a batch the builder wrote decodes"))
}

/// Regression (found by `whatever_the_builder_accepts_decodes`): the builder wrote producer
/// fields the decoder rejects, such as no producer id with a sequence number.
#[test]
fn builder_refuses_a_sequence_without_a_producer_id() {
    assert_eq!(
        one_record_with_producer(NO_PRODUCER_ID, 5).err(),
        Some(BuildError::ProducerFields {
            producer_id: NO_PRODUCER_ID,
            base_sequence: 5,
        })
    );
}

#[test]
fn builder_refuses_a_producer_id_without_a_sequence() {
    assert_eq!(
        one_record_with_producer(42, NO_SEQUENCE).err(),
        Some(BuildError::ProducerFields {
            producer_id: 42,
            base_sequence: NO_SEQUENCE,
        })
    );
}

#[test]
fn builder_refuses_a_negative_producer_id_other_than_none() {
    assert_eq!(
        one_record_with_producer(-2, 0).err(),
        Some(BuildError::ProducerFields {
            producer_id: -2,
            base_sequence: 0,
        })
    );
}

#[test]
fn builder_refuses_a_sequence_that_overflows() {
    let mut builder = BatchBuilder::new(1 << 10);
    builder.producer(7, 0, i32::MAX);
    for _ in 0..2 {
        builder.push(0, None, b"v", &[]).expect("record fits");
    }
    assert_eq!(
        builder.finish().err(),
        Some(BuildError::SequenceOverflow {
            base_sequence: i32::MAX,
            count: 2,
        })
    );
}

#[test]
fn builder_accepts_the_last_sequence_number() {
    let batch = one_record_with_producer(7, i32::MAX).expect("sequence i32::MAX is usable");
    assert_eq!(batch.header().base_sequence, i32::MAX);
    assert_eq!(batch.header().last_sequence(), i32::MAX);
}

#[test]
fn builder_refuses_an_empty_batch() {
    assert_eq!(
        BatchBuilder::new(1 << 10).finish().err(),
        Some(BuildError::Empty)
    );
}
