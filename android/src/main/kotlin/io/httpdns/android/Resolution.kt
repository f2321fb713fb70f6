package io.httpdns.android

import java.net.InetAddress

/** Which path produced an answer. */
enum class ResolutionPath(private val wire: String) {
    /** The memory cache, within the TTL. */
    CACHE("cache"),
    /** The HTTPDNS service, just now. */
    HTTPDNS("httpdns"),
    /** An expired answer, reused while it is refreshed or because nothing else answered. */
    STALE("stale"),
    /** The fallback resolver (`localDns`, the system's by default). */
    LOCALDNS("localdns"),
    /** The name was an IP address. */
    LITERAL("literal");

    override fun toString(): String = wire
}

/** An answer of [HttpDns.lookup]: the addresses and the path that answered. */
class Resolution internal constructor(
    @get:JvmName("host") val host: String,
    /** In the order to try: IPv4 first on a dual stack, IPv6 first on an IPv6-only network. */
    @get:JvmName("addresses") val addresses: List<InetAddress>,
    /** How long the answer may still be used, in milliseconds (0 for a stale answer). */
    @get:JvmName("ttlMs") val ttlMs: Long,
    @get:JvmName("path") val path: ResolutionPath,
    /** Addresses thrown away, `address: reason`. */
    @get:JvmName("dropped") val dropped: List<String>,
    /** Why the service did not answer, when another path did. */
    @get:JvmName("serviceError") val serviceError: String?,
) {
    override fun toString(): String =
        "Resolution($host ${addresses.map { IpFilter.text(it) }} via $path, ttl ${ttlMs}ms" +
            (if (dropped.isEmpty()) "" else ", dropped $dropped") + (serviceError?.let { ", service: $it" } ?: "") + ")"
}
