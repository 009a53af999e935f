//! QUIC variable-length integers.
//!
//= https://www.rfc-editor.org/rfc/rfc9000#section-16
//# QUIC packets and frames commonly use a variable-length encoding for
//# non-negative integer values.  This encoding ensures that smaller
//# integer values need fewer bytes to encode.

use bytes::{Buf, BufMut};
use std::fmt;

/// A non-negative integer below 2^62, the range a QUIC variable-length integer can carry.
#[derive(Default, Copy, Clone, Eq, PartialEq, Ord, PartialOrd, Hash)]
pub struct VarInt(u64);

/// The value did not fit in 62 bits.
#[derive(Debug, Copy, Clone, Eq, PartialEq, thiserror::Error)]
#[error("value {0} exceeds the QUIC variable-length integer range (2^62 - 1)")]
pub struct VarIntOutOfRange(pub u64);

/// The buffer ended before a complete value could be read.
#[derive(Debug, Copy, Clone, Eq, PartialEq, thiserror::Error)]
#[error("unexpected end of buffer")]
pub struct UnexpectedEnd;

impl VarInt {
    /// The largest representable value, 2^62 - 1.
    pub const MAX: VarInt = VarInt((1 << 62) - 1);
    /// Zero.
    pub const ZERO: VarInt = VarInt(0);

    /// Builds a `VarInt` from a `u32`, which always fits.
    pub const fn from_u32(value: u32) -> Self {
        VarInt(value as u64)
    }

    /// Builds a `VarInt` from a `u64`, failing if it exceeds 2^62 - 1.
    pub const fn from_u64(value: u64) -> Result<Self, VarIntOutOfRange> {
        if value <= Self::MAX.0 {
            Ok(VarInt(value))
        } else {
            Err(VarIntOutOfRange(value))
        }
    }

    /// Builds a `VarInt` from a `u64` that the caller knows to be in range, saturating at
    /// [`VarInt::MAX`] otherwise.
    pub const fn saturating(value: u64) -> Self {
        if value <= Self::MAX.0 {
            VarInt(value)
        } else {
            Self::MAX
        }
    }

    /// The value as a `u64`.
    pub const fn into_inner(self) -> u64 {
        self.0
    }

    /// Number of bytes the encoding of this value takes (1, 2, 4 or 8).
    pub const fn size(self) -> usize {
        Self::encoded_size(self.0)
    }

    /// Number of bytes the encoding of `value` takes; values beyond the range count as 8.
    pub const fn encoded_size(value: u64) -> usize {
        if value < 1 << 6 {
            1
        } else if value < 1 << 14 {
            2
        } else if value < 1 << 30 {
            4
        } else {
            8
        }
    }

    /// Reads one variable-length integer from `buf`.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-16
    //# The QUIC variable-length integer encoding reserves the two most
    //# significant bits of the first byte to encode the base-2 logarithm of
    //# the integer encoding length in bytes.
    pub fn decode<B: Buf + ?Sized>(buf: &mut B) -> Result<Self, UnexpectedEnd> {
        if !buf.has_remaining() {
            return Err(UnexpectedEnd);
        }
        let first = buf.chunk()[0];
        let len = 1usize << (first >> 6);
        if buf.remaining() < len {
            return Err(UnexpectedEnd);
        }
        let value = match len {
            1 => u64::from(buf.get_u8() & 0x3f),
            2 => u64::from(buf.get_u16() & 0x3fff),
            4 => u64::from(buf.get_u32() & 0x3fff_ffff),
            _ => buf.get_u64() & 0x3fff_ffff_ffff_ffff,
        };
        Ok(VarInt(value))
    }

    /// Writes this value to `buf` in its shortest encoding.
    pub fn encode<B: BufMut + ?Sized>(self, buf: &mut B) {
        let x = self.0;
        match self.size() {
            1 => buf.put_u8(x as u8),
            2 => buf.put_u16(0x4000 | x as u16),
            4 => buf.put_u32(0x8000_0000 | x as u32),
            _ => buf.put_u64(0xc000_0000_0000_0000 | x),
        }
    }

    /// Writes this value to `buf` using exactly `len` bytes (1, 2, 4 or 8), as needed for
    /// length fields that are reserved before their value is known.
    ///
    /// # Panics
    /// If the value does not fit in `len` bytes or `len` is not a valid encoding length; both
    /// are programming errors in the caller.
    pub fn encode_with_len<B: BufMut + ?Sized>(self, len: usize, buf: &mut B) {
        assert!(
            self.size() <= len,
            "varint {} does not fit in {len} bytes",
            self.0
        );
        let x = self.0;
        match len {
            1 => buf.put_u8(x as u8),
            2 => buf.put_u16(0x4000 | x as u16),
            4 => buf.put_u32(0x8000_0000 | x as u32),
            8 => buf.put_u64(0xc000_0000_0000_0000 | x),
            _ => panic!("invalid varint length {len}"),
        }
    }
}

impl From<u8> for VarInt {
    fn from(x: u8) -> Self {
        VarInt(x.into())
    }
}

impl From<u16> for VarInt {
    fn from(x: u16) -> Self {
        VarInt(x.into())
    }
}

impl From<u32> for VarInt {
    fn from(x: u32) -> Self {
        VarInt(x.into())
    }
}

impl TryFrom<u64> for VarInt {
    type Error = VarIntOutOfRange;
    fn try_from(x: u64) -> Result<Self, Self::Error> {
        VarInt::from_u64(x)
    }
}

impl TryFrom<usize> for VarInt {
    type Error = VarIntOutOfRange;
    fn try_from(x: usize) -> Result<Self, Self::Error> {
        VarInt::from_u64(x as u64)
    }
}

impl From<VarInt> for u64 {
    fn from(x: VarInt) -> u64 {
        x.0
    }
}

impl fmt::Debug for VarInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for VarInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    //= https://www.rfc-editor.org/rfc/rfc9000#appendix-A.1
    //# For example, the eight-byte sequence 0xc2197c5eff14e88c decodes to
    //# the decimal value 151,288,809,941,952,652; the four-byte sequence
    //# 0x9d7f3e7d decodes to 494,878,333; the two-byte sequence 0x7bbd
    //# decodes to 15,293; and the single byte 0x25 decodes to 37 (as does
    //# the two-byte sequence 0x4025).
    #[test]
    fn rfc_examples() {
        let cases: &[(&[u8], u64)] = &[
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
            (&[0x40, 0x25], 37),
        ];
        for (bytes, value) in cases {
            let mut buf = *bytes;
            assert_eq!(VarInt::decode(&mut buf).unwrap().into_inner(), *value);
            assert!(buf.is_empty());
        }
        let mut out = Vec::new();
        VarInt::from_u64(15_293).unwrap().encode(&mut out);
        assert_eq!(out, [0x7b, 0xbd]);
    }

    #[test]
    fn truncated_input_is_an_error() {
        let mut buf: &[u8] = &[0x9d, 0x7f];
        assert_eq!(VarInt::decode(&mut buf), Err(UnexpectedEnd));
        let mut empty: &[u8] = &[];
        assert_eq!(VarInt::decode(&mut empty), Err(UnexpectedEnd));
    }

    #[test]
    fn range_is_enforced() {
        assert!(VarInt::from_u64(1 << 62).is_err());
        assert_eq!(VarInt::from_u64((1 << 62) - 1).unwrap(), VarInt::MAX);
    }

    proptest::proptest! {
        #[test]
        fn roundtrip(x in 0u64..(1 << 62)) {
            let v = VarInt::from_u64(x).unwrap();
            let mut out = Vec::new();
            v.encode(&mut out);
            proptest::prop_assert_eq!(out.len(), v.size());
            let mut slice = &out[..];
            proptest::prop_assert_eq!(VarInt::decode(&mut slice).unwrap(), v);
        }
    }
}
