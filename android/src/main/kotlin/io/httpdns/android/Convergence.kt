package io.httpdns.android

import okhttp3.HttpUrl
import okhttp3.HttpUrl.Companion.toHttpUrlOrNull

/**
 * Host convergence (seed `000` §2), as `httpdns_client::convergence`: the parsed URL's
 * `host[:port]` is matched against `mergeHostConfigs` (a URL without a port, or on its scheme's
 * default port, matches both `host` and `host:default`), never a string replace, so the same name
 * in the path or query is left alone.
 */
internal object Convergence {
    /** A request the failover may move between hosts. */
    class Converged(val original: HttpUrl, val pathAndQuery: String) {
        /** The URL on `host` (`cdn.xxx.com`, `cdn.xxx.com:8443`, `2400:3200::1`, `[2400:3200::1]:443`). */
        fun onHost(host: String): HttpUrl? {
            val h = if (host.count { it == ':' } > 1 && !host.startsWith("[")) "[$host]" else host
            return "${original.scheme}://$h$pathAndQuery".toHttpUrlOrNull()
        }
    }

    private fun hostText(url: HttpUrl): String = url.host.lowercase()

    /** `host[:port]` of a URL in the document's canonical form (no port when it is the default). */
    fun authority(url: HttpUrl): String {
        val h = hostText(url)
        if (url.port == HttpUrl.defaultPort(url.scheme)) return h
        return if (h.contains(':')) "[$h]:${url.port}" else "$h:${url.port}"
    }

    private fun authorities(url: HttpUrl): List<String> {
        val h = hostText(url)
        if (url.port != HttpUrl.defaultPort(url.scheme)) return listOf(authority(url))
        return listOf(h, if (h.contains(':')) "[$h]:${url.port}" else "$h:${url.port}")
    }

    fun pathAndQuery(url: HttpUrl): String = url.encodedPath + (url.encodedQuery?.let { "?$it" } ?: "")

    fun converge(doc: ConfigDocument, deviceId: String, url: HttpUrl): Converged? {
        if (!doc.convergenceEnabled(deviceId)) return null
        val auths = authorities(url)
        val pq = pathAndQuery(url)
        for (m in doc.mergeHostConfigs) {
            if (m.host in auths) {
                if (!Buckets.enabled(m.host, deviceId, m.rate)) return null
                return Converged(url, m.pathPrefix + pq)
            }
        }
        return if (doc.hostListConfig.any { it.host in auths }) Converged(url, pq) else null
    }

    /** The unified hosts of this device, in order. */
    fun hostList(doc: ConfigDocument, deviceId: String): List<String> {
        if (!doc.convergenceEnabled(deviceId)) return emptyList()
        return doc.hostListConfig.filter { Buckets.enabled(it.host, deviceId, it.rate) }.map { it.host }
    }
}
