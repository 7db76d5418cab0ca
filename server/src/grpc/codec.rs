//! The gRPC codec: prost's, with buffers of 1 KiB per call instead of 8 KiB, since a
//! quota stream keeps its encoder's and decoder's buffers while it is open, and a fleet
//! opens thousands; a larger message grows them as it needs.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::ProstCodec;

/// The first size of a call's buffers.
const BUFFER: usize = 1024;
/// The bytes encoded before a stream yields (tonic's default).
const YIELD_AFTER: usize = 32 * 1024;

/// Prost's codec with [`BUFFER`]-byte buffers.
#[derive(Debug, Clone)]
pub(crate) struct SmallCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SmallCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SmallCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = <ProstCodec<T, U> as Codec>::Decoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::new(BUFFER, YIELD_AFTER))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(BufferSettings::new(BUFFER, YIELD_AFTER))
    }
}
