package io.httpdns.android

import okhttp3.HttpUrl

/** Parses and canonicalises hosts as the config crate does (`httpdns_config::Host`). */
internal object HostNames {
    /**
     * Canonical `host[:port]`: lowercase names, compressed IPv6, brackets only before a port.
     * Null when `input` is not a host the document accepts.
     */
    fun canonical(input: String): String? {
        if (input.isEmpty()) return null
        if (input.startsWith("[")) {
            val close = input.indexOf(']')
            if (close < 0) return null
            val ip = ipv6(input.substring(1, close)) ?: return null
            val after = input.substring(close + 1)
            if (after.isEmpty()) return ip
            if (!after.startsWith(":")) return null
            val port = port(after.substring(1)) ?: return null
            return "[$ip]:$port"
        }
        if (input.count { it == ':' } > 1) return ipv6(input)
        val colon = input.lastIndexOf(':')
        val name = if (colon >= 0) input.substring(0, colon) else input
        val port = if (colon >= 0) (port(input.substring(colon + 1)) ?: return null) else null
        val host = if (isIpv4(name)) name else domain(name) ?: return null
        return if (port == null) host else "$host:$port"
    }

    private fun port(p: String): Int? {
        if (p.isEmpty() || p.length > 5 || !p.all { it in '0'..'9' }) return null
        val n = p.toInt()
        return if (n in 1..65535) n else null
    }

    fun isIpv4(s: String): Boolean {
        val parts = s.split('.')
        return parts.size == 4 && parts.all { p ->
            p.isNotEmpty() && p.length <= 3 && p.all { it in '0'..'9' } && p.toInt() <= 255 && (p == "0" || !p.startsWith("0"))
        }
    }

    /** Compressed IPv6 text as OkHttp canonicalises it, or null. */
    fun ipv6(s: String): String? {
        if (!s.contains(':')) return null
        val url = HttpUrl.Builder().scheme("http").let {
            try { it.host(s) } catch (e: IllegalArgumentException) { return null }
        }.build()
        return url.host
    }

    private fun domain(name: String): String? {
        val n = name.lowercase()
        if (n.isEmpty() || n.length > 253 || n.startsWith(".") || n.endsWith(".")) return null
        val labels = n.split('.')
        if (labels.size < 2 && n != "localhost") return null
        for (l in labels) {
            if (l.isEmpty() || l.length > 63) return null
            if (!l.all { it in 'a'..'z' || it in '0'..'9' || it == '-' || it == '_' }) return null
            if (l.startsWith("-") || l.endsWith("-")) return null
        }
        return n
    }
}

/** The resolution policy the config center decided for this device (`"resolution"` in the POST answer). */
class ResolutionDecision internal constructor(
    /** False: LocalDNS at once, the service is not asked. */
    @get:JvmName("httpdns") val httpdns: Boolean,
    /** False: a stale or backup answer instead of LocalDNS when the service fails. */
    @get:JvmName("localDnsFallback") val localDnsFallback: Boolean,
    /** The service's per-request timeout, 0 when the document does not say. */
    @get:JvmName("timeoutMs") val timeoutMs: Long,
    @get:JvmName("preResolveHosts") val preResolveHosts: List<String>,
) {
    override fun toString() =
        "ResolutionDecision(httpdns=$httpdns, localDnsFallback=$localDnsFallback, timeoutMs=$timeoutMs, preResolveHosts=$preResolveHosts)"

    internal companion object {
        val DEFAULT = ResolutionDecision(true, true, 0, emptyList())

        fun parse(m: Map<String, Any?>?): ResolutionDecision? {
            if (m == null) return null
            return ResolutionDecision(
                m.bool("httpdns") ?: true,
                m.bool("localDnsFallback") ?: true,
                m.long("timeoutMs") ?: 0,
                m.strings("preResolveHosts"),
            )
        }

        /**
         * The device's decision from a document's `resolutionPolicy` when the server did not decide
         * one (a GET body, a bundled default): `segments` then `default`, the device bucketed by
         * `sha256("httpdnsRate." + deviceId)`. Places are the server's to match (it knows the
         * client's address), so they are not applied here.
         */
        fun fromPolicy(policy: Map<String, Any?>?, segment: String?, deviceId: String): ResolutionDecision? {
            if (policy == null) return null
            val default = policy.obj("default") ?: emptyMap()
            val seg = if (segment == null) null else
                policy.list("segments").mapNotNull { Json.asObject(it) }.firstOrNull { it.str("segment") == segment }
            fun pick(k: String): Any? = seg?.get(k) ?: default[k]
            val rate = (pick("httpdnsRate") as? Number)?.toDouble() ?: 1.0
            return ResolutionDecision(
                Buckets.enabled(Buckets.HTTPDNS_RATE_KEY, deviceId, rate),
                (pick("localDnsFallback") as? Boolean) ?: true,
                (pick("timeoutMs") as? Number)?.toLong() ?: 0,
                policy.strings("preResolveHosts"),
            )
        }
    }
}

/** The config document (CONTRACT "Config document"), parsed leniently: unknown fields are ignored. */
internal class ConfigDocument(
    val mergeHostConfigs: List<MergeHost>,
    val hostListConfig: List<HostEntry>,
    val reviveProbeIntervalMs: Long,
    val configRequestIntervalMs: Long,
    val configVersion: Long,
    val publicIpList: List<String>,
    val convergenceRate: Double?,
    /** The server's per-device decision, when the body was rendered for this device. */
    val resolution: ResolutionDecision?,
    val resolutionPolicy: Map<String, Any?>?,
) {
    class MergeHost(val host: String, val pathPrefix: String, val rate: Double)
    class HostEntry(val host: String, val rate: Double)

    fun convergenceEnabled(deviceId: String): Boolean =
        Buckets.enabled(Buckets.CONVERGENCE_KEY, deviceId, convergenceRate ?: 1.0)

    fun resolutionFor(segment: String?, deviceId: String): ResolutionDecision =
        resolution ?: ResolutionDecision.fromPolicy(resolutionPolicy, segment, deviceId) ?: ResolutionDecision.DEFAULT

    class Invalid(val field: String, message: String) : Exception("$field: $message")

    companion object {
        const val MIN_INTERVAL_MS = 10_000L
        const val MAX_INTERVAL_MS = 86_400_000L
        const val MAX_ENTRIES = 256

        /** Parses and validates a served body, with the config crate's rules. */
        fun parse(body: String): ConfigDocument {
            val m = try { Json.parseObject(body) } catch (e: Json.ParseException) { throw Invalid("body", "malformed document: ${e.message}") }
            fun rate(o: Map<String, Any?>, field: String): Double {
                val r = o.double("rate") ?: throw Invalid(field, "rate is required")
                if (r.isNaN() || r < 0.0 || r > 1.0) throw Invalid(field, "rate $r must be from 0 to 1")
                return r
            }
            fun host(o: Map<String, Any?>, field: String): String {
                val h = o.str("host") ?: throw Invalid(field, "host is required")
                return HostNames.canonical(h) ?: throw Invalid(field, "$h is not a host")
            }
            if (m["mergeHostConfigs"] !is List<*>) throw Invalid("mergeHostConfigs", "required")
            if (m["hostListConfig"] !is List<*>) throw Invalid("hostListConfig", "required")
            val merges = m.list("mergeHostConfigs").mapIndexed { i, v ->
                val o = Json.asObject(v) ?: throw Invalid("mergeHostConfigs[$i]", "an object is required")
                val f = "mergeHostConfigs[$i]"
                MergeHost(host(o, "$f.host"), o.str("pathPrefix") ?: throw Invalid("$f.pathPrefix", "required"), rate(o, "$f.rate"))
            }
            val hosts = m.list("hostListConfig").mapIndexed { i, v ->
                val o = Json.asObject(v) ?: throw Invalid("hostListConfig[$i]", "an object is required")
                HostEntry(host(o, "hostListConfig[$i].host"), rate(o, "hostListConfig[$i].rate"))
            }
            val revive = m.long("reviveProbeInterval") ?: throw Invalid("reviveProbeInterval", "required")
            val poll = m.long("configRequestInterval") ?: throw Invalid("configRequestInterval", "required")
            val conv = m.double("convergenceRate")
            if (conv != null && (conv.isNaN() || conv < 0 || conv > 1)) throw Invalid("convergenceRate", "must be from 0 to 1")
            val doc = ConfigDocument(
                merges, hosts, revive, poll, m.long("configVersion") ?: 0,
                m.strings("publicIpList"), conv,
                ResolutionDecision.parse(m.obj("resolution")), m.obj("resolutionPolicy"),
            )
            doc.validate()
            return doc
        }
    }

    private fun validate() {
        if (hostListConfig.isEmpty()) throw Invalid("hostListConfig", "at least one host is required")
        if (hostListConfig.size > MAX_ENTRIES) throw Invalid("hostListConfig", "at most $MAX_ENTRIES hosts")
        if (mergeHostConfigs.size > MAX_ENTRIES) throw Invalid("mergeHostConfigs", "at most $MAX_ENTRIES entries")
        if (publicIpList.size > MAX_ENTRIES) throw Invalid("publicIpList", "at most $MAX_ENTRIES addresses")
        val seen = HashSet<String>()
        hostListConfig.forEachIndexed { i, h ->
            if (!seen.add(h.host)) throw Invalid("hostListConfig[$i].host", "${h.host} is listed twice")
        }
        val prefixes = HashSet<String>()
        mergeHostConfigs.forEachIndexed { i, mh ->
            val p = mh.pathPrefix
            val valid = p.startsWith("/") && p.length >= 2 && p.length <= 256 && !p.endsWith("/") &&
                p.split('/').drop(1).all { it.isNotEmpty() && it != "." && it != ".." } &&
                p.all { it.code in 0x21..0x7e && it != '?' && it != '#' && it != '%' && it != '\\' }
            if (!valid) throw Invalid("mergeHostConfigs[$i].pathPrefix", "not a valid path prefix")
            if (!prefixes.add(p)) throw Invalid("mergeHostConfigs[$i].pathPrefix", "$p is used twice")
        }
        for ((f, v) in listOf("reviveProbeInterval" to reviveProbeIntervalMs, "configRequestInterval" to configRequestIntervalMs)) {
            if (v < MIN_INTERVAL_MS || v > MAX_INTERVAL_MS) throw Invalid(f, "must be $MIN_INTERVAL_MS to $MAX_INTERVAL_MS milliseconds")
        }
    }
}
