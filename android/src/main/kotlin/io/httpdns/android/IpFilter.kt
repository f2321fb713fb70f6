package io.httpdns.android

import java.net.Inet4Address
import java.net.Inet6Address
import java.net.InetAddress

/** Address classes as `httpdns_core::ip::classify`: what may be used as an answer. */
internal object IpFilter {
    enum class Class { PUBLIC, PRIVATE, INVALID }

    /** Parses an IP literal without any lookup; null when it is not one. */
    fun parse(text: String): InetAddress? {
        val t = text.trim().removePrefix("[").removeSuffix("]")
        if (HostNames.isIpv4(t)) {
            val b = t.split('.').map { it.toInt().toByte() }.toByteArray()
            return InetAddress.getByAddress(t, b)
        }
        if (!t.contains(':')) return null
        val canon = HostNames.ipv6(t) ?: return null
        // InetAddress parses a literal with ':' without asking a resolver.
        return try { InetAddress.getByName(canon) } catch (e: Exception) { null }
    }

    fun classify(ip: InetAddress): Class {
        val b = ip.address
        if (b.size == 4) return classify4(b)
        if (ip is Inet4Address) return classify4(b)
        val seg = IntArray(8) { ((b[2 * it].toInt() and 0xff) shl 8) or (b[2 * it + 1].toInt() and 0xff) }
        if (seg[0] == 0 && seg[1] == 0 && seg[2] == 0 && seg[3] == 0 && seg[4] == 0 && seg[5] == 0xffff) {
            return classify4(b.copyOfRange(12, 16))
        }
        val unspecified = seg.all { it == 0 }
        val loopback = seg.take(7).all { it == 0 } && seg[7] == 1
        val private6 = (seg[0] and 0xfe00) == 0xfc00 || (seg[0] and 0xffc0) == 0xfe80
        if (unspecified || (seg[0] and 0xff00) == 0xff00 ||
            (seg[0] == 0x2001 && seg[1] == 0x0db8) ||
            (seg[0] == 0x3fff && seg[1] < 0x1000) ||
            (seg[0] == 0x0100 && seg[1] == 0 && seg[2] == 0 && seg[3] == 0) ||
            (seg[0] == 0x0064 && seg[1] == 0xff9b && seg[2] == 1) ||
            ((seg[0] and 0xe000) != 0x2000 && !private6 && !loopback)
        ) return Class.INVALID
        if (loopback || private6) return Class.PRIVATE
        return Class.PUBLIC
    }

    private fun classify4(b: ByteArray): Class {
        val a = b[0].toInt() and 0xff
        val bb = b[1].toInt() and 0xff
        val c = b[2].toInt() and 0xff
        val d = b[3].toInt() and 0xff
        val doc = (a == 192 && bb == 0 && c == 2) || (a == 198 && bb == 51 && c == 100) || (a == 203 && bb == 0 && c == 113)
        if (a == 0 || a in 224..239 || a >= 240 || doc || (a == 198 && (bb and 0xfe) == 18) || (a == 192 && bb == 0 && c == 0) ||
            (a == 255 && bb == 255 && c == 255 && d == 255)
        ) return Class.INVALID
        if (a == 10 || (a == 172 && (bb and 0xf0) == 16) || (a == 192 && bb == 168) || a == 127 ||
            (a == 169 && bb == 254) || (a == 100 && (bb and 0xc0) == 64)
        ) return Class.PRIVATE
        return Class.PUBLIC
    }

    /** The canonical text of an address (IPv4-mapped IPv6 as IPv4), used as the label key. */
    fun text(ip: InetAddress): String {
        val b = ip.address
        if (b.size == 16 && (0 until 10).all { b[it].toInt() == 0 } && b[10].toInt() and 0xff == 0xff && b[11].toInt() and 0xff == 0xff) {
            return (12 until 16).joinToString(".") { (b[it].toInt() and 0xff).toString() }
        }
        return if (ip is Inet6Address) HostNames.ipv6(ip.hostAddress!!.substringBefore('%'))!! else ip.hostAddress!!
    }

    class Result(val kept: List<InetAddress>, val dropped: List<Pair<String, String>>)

    /**
     * Splits `ips` into the usable and the dropped (with the reason), as `resolver::filter`:
     * unroutable always, private unless allowed, labelled nodes of another carrier than `clientIsp`.
     */
    fun filter(ips: List<InetAddress>, allowPrivate: Boolean, clientIsp: String?, labels: Map<String, String>): Result {
        val kept = ArrayList<InetAddress>()
        val keptText = HashSet<String>()
        val dropped = ArrayList<Pair<String, String>>()
        for (raw in ips) {
            val t = text(raw)
            val ip = if (raw is Inet6Address && !t.contains(':')) InetAddress.getByAddress(t, raw.address.copyOfRange(12, 16)) else raw
            val theirs = labels[t]
            val reason = when (classify(ip)) {
                Class.INVALID -> "unroutable address"
                Class.PRIVATE -> if (allowPrivate) null else "private or loopback address for a public name"
                Class.PUBLIC -> null
            } ?: if (clientIsp != null && theirs != null && !theirs.equals(clientIsp, ignoreCase = true)) "node of another carrier" else null
            if (reason != null) dropped.add(t to reason) else if (keptText.add(t)) kept.add(ip)
        }
        return Result(kept, dropped)
    }
}
