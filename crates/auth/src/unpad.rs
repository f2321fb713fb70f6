//! PKCS#7 padding checked without a branch on the plaintext, so a bad padding and a good one
//! cost the same and answer the same: the padding oracle of CBC (a server that tells bad padding
//! from a bad message lets a client decrypt a captured ciphertext byte by byte, and forge one).
//!
//! The caller runs its own check of the message on what this returns whether the padding was
//! valid or not ([`crate::decrypt_with`], [`crate::aliyun_v2::open_with`]), and fails the same
//! way for either.

use subtle::{Choice, ConditionallySelectable, ConstantTimeEq, ConstantTimeGreater};

/// The length of `buf` (whole blocks of `block` bytes, at least one) without its padding, and
/// whether the padding was valid; when it was not, the whole length. Every call reads the
/// last `block` bytes and nothing depends on their values but the result.
pub(crate) fn unpad(buf: &[u8], block: u8) -> (usize, Choice) {
    let n = buf.len();
    debug_assert!(n >= usize::from(block) && n % usize::from(block) == 0);
    let pad = buf[n - 1];
    let mut ok = !pad.ct_eq(&0) & !pad.ct_gt(&block);
    for i in 0..block {
        let b = buf[n - 1 - usize::from(i)];
        // Bytes inside the padding (i < pad) must all equal it.
        let inside = pad.ct_gt(&i);
        ok &= !inside | b.ct_eq(&pad);
    }
    let unpadded = (n as u64).saturating_sub(u64::from(pad));
    (u64::conditional_select(&(n as u64), &unpadded, ok) as usize, ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_paddings_are_removed_and_invalid_ones_kept_whole() {
        let mut b = vec![b'a'; 13];
        b.extend([3, 3, 3]);
        let (len, ok) = unpad(&b, 16);
        assert_eq!((len, bool::from(ok)), (13, true));
        let full = [16u8; 16];
        assert_eq!(
            {
                let (l, o) = unpad(&full, 16);
                (l, bool::from(o))
            },
            (0, true)
        );
        for bad in [[0u8; 16].to_vec(), [17u8; 16].to_vec(), {
            let mut v = vec![b'a'; 13];
            v.extend([3, 2, 3]);
            v
        }] {
            let (len, ok) = unpad(&bad, 16);
            assert_eq!((len, bool::from(ok)), (16, false), "{bad:?}");
        }
        let mut des = vec![b'x'; 7];
        des.push(1);
        assert_eq!(
            {
                let (l, o) = unpad(&des, 8);
                (l, bool::from(o))
            },
            (7, true)
        );
        assert!(!bool::from(unpad(&[9u8; 8], 8).1), "a pad longer than a DES block");
    }
}
