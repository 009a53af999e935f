//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! M2HO rewrites one 16-bit field of a TCP header, the advertised window. Recomputing the
//! checksum over the whole segment would cost a pass over the payload for every packet;
//! RFC 1624 updates it from the old and new field alone.

/// Adds `data` as big-endian 16-bit words (a trailing odd byte padded with zero) to a
/// ones'-complement accumulator, without folding.
pub fn accumulate(mut sum: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(u16::from_be_bytes([*last, 0]));
    }
    sum
}

/// Folds an accumulator to 16 bits (end-around carry) and complements it: the checksum
/// field's value.
pub fn finish(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

//= https://www.rfc-editor.org/rfc/rfc1624#section-3
//# Given the following notation:
//#
//#    HC  - old checksum in header
//#    C   - one's complement sum of old header
//#    HC' - new checksum in header
//#    C'  - one's complement sum of new header
//#    m   - old value of a 16-bit field
//#    m'  - new value of a 16-bit field
//#
//# then the equation:
//#
//#    HC' = ~(C + (-m) + m')    --    [Eqn. 3]
//#        = ~(~HC + ~m + m')
/// The checksum after one 16-bit field of the covered data changed from `old` to `new`
/// (RFC 1624, Eqn. 3). Unlike Eqn. 2 it never turns a correct checksum into `-0`.
pub fn update16(check: u16, old: u16, new: u16) -> u16 {
    let sum = u64::from(!check) + u64::from(!old) + u64::from(new);
    finish(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of RFC 1071 section 3: the sum of these words is 0xddf2.
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(accumulate(0, &data)), !0xddf2);
    }

    /// RFC 1624 section 4: a header whose checksum is 0xdd2f has a field changed from
    /// 0x5555 to 0x3285; the correct new checksum is 0x0000 (Eqn. 3), not 0xffff (Eqn. 2).
    #[test]
    fn rfc1624_example_gives_plus_zero() {
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    #[test]
    fn update_matches_recomputation() {
        // Every position of a field in some data, several old/new values.
        let mut data: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        for pos in (0..data.len()).step_by(2) {
            for new in [0u16, 1, 0x7fff, 0x8000, 0xfffe, 0xffff, 0x1234] {
                let before = finish(accumulate(0, &data));
                let old = u16::from_be_bytes([data[pos], data[pos + 1]]);
                data[pos..pos + 2].copy_from_slice(&new.to_be_bytes());
                let after = finish(accumulate(0, &data));
                let inc = update16(before, old, new);
                // Ones' complement has two zeros; a receiver's verification accepts both.
                assert!(
                    inc == after || (inc ^ after == 0xffff && (inc == 0 || after == 0)),
                    "pos {pos} new {new:#x}: {inc:#x} vs {after:#x}"
                );
            }
        }
    }
}
