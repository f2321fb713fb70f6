package io.httpdns.android

import java.math.BigInteger
import java.security.MessageDigest

/**
 * Ed25519 signature verification (RFC 8032 §5.1.7), in plain Kotlin over [BigInteger]:
 * Android has no EdDSA before API 33, and a config document is verified a few times a day,
 * so a small, dependency-free verifier (a few milliseconds per check) beats a crypto library
 * in every app. Checked against RFC 8032's test vectors and the server's signatures
 * (`vectors/config-signatures.json`).
 *
 * As ed25519-dalek's `verify` (the server's library): `s` must be below the group order, and the
 * encoding of `[s]B - [h]A` must equal the signature's `R` bytes.
 */
object Ed25519 {
    private val P: BigInteger = BigInteger.ONE.shiftLeft(255).subtract(BigInteger.valueOf(19))
    private val L: BigInteger = BigInteger.ONE.shiftLeft(252).add(BigInteger("27742317777372353535851937790883648493"))
    private val D: BigInteger = BigInteger.valueOf(-121665).multiply(BigInteger.valueOf(121666).modInverse(P)).mod(P)
    private val D2: BigInteger = D.shiftLeft(1).mod(P)
    private val SQRT_M1: BigInteger = BigInteger.valueOf(2).modPow(P.subtract(BigInteger.ONE).shiftRight(2), P)
    private val TWO = BigInteger.valueOf(2)

    private class Point(val x: BigInteger, val y: BigInteger, val z: BigInteger, val t: BigInteger)

    private val ZERO_POINT = Point(BigInteger.ZERO, BigInteger.ONE, BigInteger.ONE, BigInteger.ZERO)
    private val BASE: Point = run {
        val y = BigInteger.valueOf(4).multiply(BigInteger.valueOf(5).modInverse(P)).mod(P)
        val x = recoverX(y, 0)!!
        Point(x, y, BigInteger.ONE, x.multiply(y).mod(P))
    }

    private fun add(p: Point, q: Point): Point {
        val a = p.y.subtract(p.x).multiply(q.y.subtract(q.x)).mod(P)
        val b = p.y.add(p.x).multiply(q.y.add(q.x)).mod(P)
        val c = p.t.multiply(D2).multiply(q.t).mod(P)
        val d = p.z.multiply(TWO).multiply(q.z).mod(P)
        val e = b.subtract(a)
        val f = d.subtract(c)
        val g = d.add(c)
        val h = b.add(a)
        return Point(e.multiply(f).mod(P), g.multiply(h).mod(P), f.multiply(g).mod(P), e.multiply(h).mod(P))
    }

    private fun mul(s: BigInteger, p: Point): Point {
        var q = ZERO_POINT
        for (i in s.bitLength() - 1 downTo 0) {
            q = add(q, q)
            if (s.testBit(i)) q = add(q, p)
        }
        return q
    }

    private fun negate(p: Point) = Point(P.subtract(p.x).mod(P), p.y, p.z, P.subtract(p.t).mod(P))

    private fun recoverX(y: BigInteger, sign: Int): BigInteger? {
        if (y >= P) return null
        val y2 = y.multiply(y)
        val x2 = y2.subtract(BigInteger.ONE).multiply(D.multiply(y2).add(BigInteger.ONE).modInverse(P)).mod(P)
        if (x2.signum() == 0) return if (sign == 1) null else BigInteger.ZERO
        var x = x2.modPow(P.add(BigInteger.valueOf(3)).shiftRight(3), P)
        if (x.multiply(x).subtract(x2).mod(P).signum() != 0) x = x.multiply(SQRT_M1).mod(P)
        if (x.multiply(x).subtract(x2).mod(P).signum() != 0) return null
        if (x.testBit(0) != (sign == 1)) x = P.subtract(x)
        return x
    }

    private fun leInt(b: ByteArray, from: Int, to: Int): BigInteger {
        val be = ByteArray(to - from)
        for (i in be.indices) be[i] = b[to - 1 - i]
        return BigInteger(1, be)
    }

    private fun decode(b: ByteArray): Point? {
        if (b.size != 32) return null
        val sign = (b[31].toInt() ushr 7) and 1
        val c = b.copyOf()
        c[31] = (c[31].toInt() and 0x7f).toByte()
        val y = leInt(c, 0, 32)
        val x = recoverX(y, sign) ?: return null
        return Point(x, y, BigInteger.ONE, x.multiply(y).mod(P))
    }

    private fun encode(p: Point): ByteArray {
        val zi = p.z.modInverse(P)
        val x = p.x.multiply(zi).mod(P)
        val y = p.y.multiply(zi).mod(P)
        val out = ByteArray(32)
        val be = y.toByteArray()
        for (i in 0 until 32) {
            val j = be.size - 1 - i
            out[i] = if (j >= 0) be[j] else 0
        }
        if (x.testBit(0)) out[31] = (out[31].toInt() or 0x80).toByte()
        return out
    }

    /** Whether `signature` (64 bytes) is `publicKey`'s (32 bytes) signature of `message`. */
    @JvmStatic
    fun verify(publicKey: ByteArray, message: ByteArray, signature: ByteArray): Boolean {
        if (publicKey.size != 32 || signature.size != 64) return false
        val a = decode(publicKey) ?: return false
        val s = leInt(signature, 32, 64)
        if (s >= L) return false
        val md = MessageDigest.getInstance("SHA-512")
        md.update(signature, 0, 32)
        md.update(publicKey)
        md.update(message)
        val hBytes = md.digest()
        val h = leInt(hBytes, 0, 64).mod(L)
        val r = add(mul(s, BASE), negate(mul(h, a)))
        return encode(r).contentEquals(signature.copyOfRange(0, 32))
    }

    /** [verify] with the key and signature in standard base64, as the config center serves them. */
    @JvmStatic
    fun verifyBase64(publicKeyB64: String, message: ByteArray, signatureB64: String): Boolean {
        val k = Codec.unbase64(publicKeyB64) ?: return false
        val s = Codec.unbase64(signatureB64) ?: return false
        return verify(k, message, s)
    }
}
