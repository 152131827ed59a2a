//! Frames already waiting for a client go out in one write (one syscall, not one per event),
//! but a large frame goes alone: copying it into a batch would hold it twice (a `session_end`
//! carrying a run's 19 MiB of results did, at the server's peak memory).

use bytes::Bytes;
use tokio::sync::mpsc;

/// A frame this large (a tool's result, a run's end) is sent as it is, never batched.
pub(crate) const LARGE: usize = 64 * 1024;

/// `first` and the small frames waiting after it in `receiver`, as one write. A large frame
/// met on the way is put in `large`, to go out next, on its own.
pub(crate) fn batch(
    first: Bytes,
    receiver: &mut mpsc::Receiver<Bytes>,
    large: &mut Option<Bytes>,
) -> Bytes {
    if first.len() >= LARGE {
        return first;
    }
    let mut batch: Option<Vec<u8>> = None;
    while let Ok(next) = receiver.try_recv() {
        if next.len() >= LARGE {
            *large = Some(next);
            break;
        }
        let bytes = batch.get_or_insert_with(|| {
            let mut bytes = Vec::with_capacity(first.len() + next.len() + 512);
            bytes.extend_from_slice(&first);
            bytes
        });
        bytes.extend_from_slice(&next);
        if bytes.len() >= LARGE {
            break;
        }
    }
    batch.map_or(first, Bytes::from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn small_frames_batch_and_a_large_one_goes_alone_uncopied() {
        let (sender, mut receiver) = mpsc::channel(8);
        let large_frame = Bytes::from(vec![b'x'; LARGE]);
        for frame in [
            Bytes::from_static(b"b"),
            Bytes::from_static(b"c"),
            large_frame.clone(),
            Bytes::from_static(b"d"),
        ] {
            sender.send(frame).await.unwrap();
        }
        let mut large = None;
        let first = batch(Bytes::from_static(b"a"), &mut receiver, &mut large);
        assert_eq!(&first[..], b"abc");
        let next = large.take().unwrap();
        // The same buffer, not a copy of it.
        assert_eq!(next.as_ptr(), large_frame.as_ptr());
        assert_eq!(batch(next, &mut receiver, &mut large).len(), LARGE);
        let last = receiver.recv().await.unwrap();
        assert_eq!(&batch(last, &mut receiver, &mut large)[..], b"d");
        assert!(large.is_none());
    }
}
