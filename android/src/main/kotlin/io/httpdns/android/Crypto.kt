package io.httpdns.android

import java.security.MessageDigest
import javax.crypto.Cipher
import javax.crypto.Mac
import javax.crypto.spec.GCMParameterSpec
import javax.crypto.spec.IvParameterSpec
import javax.crypto.spec.SecretKeySpec

/** Hex and base64 (java.util.Base64 is API 26, android.util.Base64 is not on the JVM). */
internal object Codec {
    private const val HEX = "0123456789abcdef"
    private const val B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    fun hex(bytes: ByteArray): String {
        val out = StringBuilder(bytes.size * 2)
        for (b in bytes) {
            val v = b.toInt() and 0xff
            out.append(HEX[v ushr 4]).append(HEX[v and 15])
        }
        return out.toString()
    }

    /** Null unless `text` is an even number of hex digits (either case). */
    fun unhex(text: String): ByteArray? {
        if (text.length % 2 != 0) return null
        val out = ByteArray(text.length / 2)
        for (i in out.indices) {
            val hi = Character.digit(text[2 * i], 16)
            val lo = Character.digit(text[2 * i + 1], 16)
            if (hi < 0 || lo < 0) return null
            out[i] = ((hi shl 4) or lo).toByte()
        }
        return out
    }

    fun base64(bytes: ByteArray): String {
        val out = StringBuilder((bytes.size + 2) / 3 * 4)
        var i = 0
        while (i < bytes.size) {
            val b0 = bytes[i].toInt() and 0xff
            val b1 = if (i + 1 < bytes.size) bytes[i + 1].toInt() and 0xff else 0
            val b2 = if (i + 2 < bytes.size) bytes[i + 2].toInt() and 0xff else 0
            out.append(B64[b0 ushr 2]).append(B64[((b0 and 3) shl 4) or (b1 ushr 4)])
            out.append(if (i + 1 < bytes.size) B64[((b1 and 15) shl 2) or (b2 ushr 6)] else '=')
            out.append(if (i + 2 < bytes.size) B64[b2 and 63] else '=')
            i += 3
        }
        return out.toString()
    }

    /** Standard base64 with padding; null when malformed. */
    fun unbase64(text: String): ByteArray? {
        val s = text.trim()
        if (s.length % 4 != 0) return null
        val pad = if (s.endsWith("==")) 2 else if (s.endsWith("=")) 1 else 0
        val out = ByteArray(s.length / 4 * 3 - pad)
        var o = 0
        var i = 0
        while (i < s.length) {
            var acc = 0
            for (j in 0 until 4) {
                val c = s[i + j]
                val v = if (c == '=' && i + j >= s.length - pad) 0 else B64.indexOf(c)
                if (v < 0) return null
                acc = (acc shl 6) or v
            }
            for (j in 0 until 3) {
                if (o < out.size) out[o++] = (acc ushr (16 - 8 * j)).toByte()
            }
            i += 4
        }
        return out
    }
}

internal object Hashes {
    fun sha256(data: ByteArray): ByteArray = MessageDigest.getInstance("SHA-256").digest(data)
    fun md5Hex(text: String): String = Codec.hex(MessageDigest.getInstance("MD5").digest(text.toByteArray(Charsets.UTF_8)))
}

/**
 * The config center's gray-release buckets (`httpdns_config::rollout`), byte for byte:
 * `bucket = u64_be(sha256(key + "." + deviceId)[0..8]) % 10000`, `enabled = bucket < round(rate * 10000)`.
 */
object Buckets {
    const val COUNT: Long = 10_000
    /** The key of the global convergence switch (`convergenceRate`). */
    const val CONVERGENCE_KEY: String = "convergenceRate"
    /** The key of the resolution policy's per-device share (`httpdnsRate`). */
    const val HTTPDNS_RATE_KEY: String = "httpdnsRate"

    /** The device's bucket for `key` (a canonical host, or one of the keys above), in 0..9999. */
    @JvmStatic
    fun bucket(key: String, deviceId: String): Long {
        val d = Hashes.sha256("$key.$deviceId".toByteArray(Charsets.UTF_8))
        var v = 0L
        for (i in 0 until 8) v = (v shl 8) or (d[i].toLong() and 0xff)
        // Unsigned remainder without Long.remainderUnsigned (API 26): v = 2q + b.
        return (((v ushr 1) % (COUNT / 2)) * 2 + (v and 1)) % COUNT
    }

    /** `round(rate * 10000)`, the rate clamped to 0..1. */
    @JvmStatic
    fun threshold(rate: Double): Long {
        val r = if (rate.isNaN()) 0.0 else Math.min(1.0, Math.max(0.0, rate))
        return Math.round(r * COUNT)
    }

    @JvmStatic
    fun enabled(key: String, deviceId: String, rate: Double): Boolean = bucket(key, deviceId) < threshold(rate)
}

/** Request signatures of the HTTPDNS service. */
internal object Signing {
    /** `md5_hex(host + "-" + secret + "-" + t)`, Alibaba's `sign_resolve` (and the events') signature. */
    fun signResolve(host: String, secret: String, t: Long): String = Hashes.md5Hex("$host-$secret-$t")

    private val V2_SIGNED = setOf("id", "m", "dn", "cip", "q", "enc", "exp", "tags", "v")

    fun v2Signed(name: String): Boolean = name in V2_SIGNED || name.startsWith("sdns-")

    /** The signed text of `/v2/d` parameters: signed, non-empty, first occurrence, sorted by name. */
    fun v2Canonical(pairs: List<Pair<String, String>>): String {
        val first = LinkedHashMap<String, String>()
        for ((k, v) in pairs) if (v2Signed(k) && !first.containsKey(k)) first[k] = v
        return first.entries.filter { it.value.isNotEmpty() }.sortedBy { it.key }
            .joinToString("&") { "${it.key}=${it.value}" }
    }

    /** The HMAC key of a secret: its hex decoding (odd length padded with a leading 0), else its bytes. */
    fun v2Key(secret: String): ByteArray {
        var digits = secret.filter { !Character.isWhitespace(it) }
        if (digits.length % 2 == 1) digits = "0$digits"
        val k = Codec.unhex(digits)
        return if (k != null && k.isNotEmpty()) k else secret.toByteArray(Charsets.UTF_8)
    }

    fun v2Signature(secret: String, canonical: String): String {
        val mac = Mac.getInstance("HmacSHA256")
        mac.init(SecretKeySpec(v2Key(secret), "HmacSHA256"))
        return Codec.hex(mac.doFinal(canonical.toByteArray(Charsets.UTF_8)))
    }
}

/** `/v2/d`'s encryption: mode 1 AES-CBC/PKCS#7 with a 16-byte IV, mode 2 AES-GCM with a 12-byte nonce. */
internal object V2Cipher {
    const val CBC = 1
    const val GCM = 2

    fun key(hexKey: String): ByteArray? {
        val k = Codec.unhex(hexKey) ?: return null
        return if (k.size == 16 || k.size == 24 || k.size == 32) k else null
    }

    /** `IV ‖ ciphertext[‖ tag]`. */
    fun seal(mode: Int, key: ByteArray, iv: ByteArray, plain: ByteArray): ByteArray {
        val c = cipher(mode, Cipher.ENCRYPT_MODE, key, iv)
        return iv + c.doFinal(plain)
    }

    /** Opens `IV ‖ ciphertext[‖ tag]`; throws on a wrong key or a tampered text. */
    fun open(mode: Int, key: ByteArray, sealed: ByteArray): ByteArray {
        val n = if (mode == CBC) 16 else 12
        require(sealed.size > n) { "too short" }
        val c = cipher(mode, Cipher.DECRYPT_MODE, key, sealed.copyOfRange(0, n))
        return c.doFinal(sealed, n, sealed.size - n)
    }

    private fun cipher(mode: Int, op: Int, key: ByteArray, iv: ByteArray): Cipher {
        val spec = SecretKeySpec(key, "AES")
        return if (mode == CBC) {
            Cipher.getInstance("AES/CBC/PKCS5Padding").apply { init(op, spec, IvParameterSpec(iv)) }
        } else {
            Cipher.getInstance("AES/GCM/NoPadding").apply { init(op, spec, GCMParameterSpec(128, iv)) }
        }
    }
}
