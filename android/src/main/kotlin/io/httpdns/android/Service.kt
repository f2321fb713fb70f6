package io.httpdns.android

import okhttp3.HttpUrl
import okhttp3.HttpUrl.Companion.toHttpUrlOrNull
import okhttp3.OkHttpClient
import okhttp3.Request
import java.io.IOException
import java.io.InterruptedIOException
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

/** One name's answer from the service. */
internal class ServiceAnswer(
    /** IPv4 first, then IPv6, as text. */
    val ips: List<String>,
    val ttl: Long,
    val clientIsp: String?,
    val ipIsp: Map<String, String>,
    var server: String = "",
)

internal enum class Fault { TIMEOUT, CONNECT, SERVER }

/** Why the service gave no answer (as `httpdns_client::service::Unavailable`). */
internal sealed class Unavailable(val message: String) {
    class Sniffing(val fault: Fault) : Unavailable("every service address failed recently (sniff mode)")
    class Failed(val fault: Fault, detail: String) : Unavailable("every service address failed, last: $detail")
    class Refused(detail: String) : Unavailable("refused: $detail")
    object NotConfigured : Unavailable("no service address configured")
}

internal class ServiceResult(val answers: Map<String, ServiceAnswer>?, val error: Unavailable?)

/** An account for signed requests (`sign_resolve`, `/v2/d`, events). */
internal class Account(val id: String, val secret: String, val aesKeyHex: String?)

/**
 * The HTTPDNS service as the app sees it (`httpdns_client::service`): several addresses, the one
 * that answered tried first next time, and sniff mode when all failed (one request per
 * `sniffIntervalMs` tries them, the rest go to LocalDNS). A 4xx other than 429 and a 502 with
 * httpdns's JSON error are refusals: not retried elsewhere, no sniff mode.
 *
 * Requests: `/resolve?host=a[,b…]&query=4|6|4,6&labels=1`, or `/{account}/sign_resolve` (same,
 * with `t` and `s = md5(host-secret-t)`) when an account is set, or `/v2/d` with AES-GCM (`m=2`)
 * and the HMAC signature when the account has an AES key.
 */
internal class Service(
    bootstrap: List<HttpUrl>,
    private val account: Account?,
    private val http: OkHttpClient,
    @Volatile var timeoutMs: Long,
    private val sniffIntervalMs: Long,
    private val clock: Clock,
    private val wallSeconds: () -> Long,
) {
    private val bootstrap: List<HttpUrl> = bootstrap
    @Volatile
    private var servers: List<HttpUrl> = bootstrap
    private val preferred = AtomicInteger(0)
    private val lock = Any()
    private var allFailedAt: Long? = null
    private var allFailedFault: Fault = Fault.CONNECT

    /** Called when every address failed: the app refreshes the service-IP list. */
    @Volatile
    var onAllFailed: (() -> Unit)? = null

    fun isConfigured() = servers.isNotEmpty()

    fun servers(): List<HttpUrl> = servers

    /** Asks for `names` (at most 5, validated) in one request; the families the stack wants. */
    fun query(names: List<String>, stack: IpStack): ServiceResult {
        val list = servers
        val n = list.size
        if (n == 0) return ServiceResult(null, Unavailable.NotConfigured)
        synchronized(lock) {
            val at = allFailedAt
            if (at != null) {
                if (clock.millis() - at < sniffIntervalMs) return ServiceResult(null, Unavailable.Sniffing(allFailedFault))
                allFailedAt = clock.millis()
            }
        }
        val first = Math.abs(preferred.get()) % n
        var last: Pair<Fault, String> = Fault.CONNECT to ""
        for (i in 0 until n) {
            val idx = (first + i) % n
            val base = list[idx]
            when (val r = ask(base, names, stack)) {
                is Attempt.Ok -> {
                    preferred.set(idx)
                    synchronized(lock) { allFailedAt = null }
                    r.answers.values.forEach { it.server = base.toString() }
                    return ServiceResult(r.answers, null)
                }
                is Attempt.Refused -> return ServiceResult(null, Unavailable.Refused(r.detail))
                is Attempt.Retry -> last = r.fault to "$base: ${r.detail}"
            }
        }
        synchronized(lock) {
            allFailedAt = clock.millis()
            allFailedFault = last.first
        }
        onAllFailed?.invoke()
        return ServiceResult(null, Unavailable.Failed(last.first, last.second))
    }

    private sealed class Attempt {
        class Ok(val answers: Map<String, ServiceAnswer>) : Attempt()
        class Retry(val fault: Fault, val detail: String) : Attempt()
        class Refused(val detail: String) : Attempt()
    }

    private fun families(stack: IpStack): String = when (stack) {
        IpStack.IPV6 -> "6"
        IpStack.IPV4 -> "4"
        else -> "4,6"
    }

    internal fun url(base: HttpUrl, names: List<String>, stack: IpStack): HttpUrl {
        val host = names.joinToString(",")
        val q = families(stack)
        val acc = account
        val b = base.newBuilder().query(null)
        if (acc == null) {
            return b.encodedPath("/resolve").addQueryParameter("host", host).addQueryParameter("query", q)
                .addQueryParameter("labels", "1").build()
        }
        // Valid for ten minutes: long enough for clock skew, short against replay.
        val t = wallSeconds() + 600
        val aes = acc.aesKeyHex?.let { V2Cipher.key(it) }
        if (aes != null) {
            val plain = Json.write(linkedMapOf("dn" to host, "q" to q))
            val nonce = ByteArray(12).also { java.security.SecureRandom().nextBytes(it) }
            val enc = Codec.hex(V2Cipher.seal(V2Cipher.GCM, aes, nonce, plain.toByteArray(Charsets.UTF_8)))
            val params = listOf("id" to acc.id, "m" to "2", "enc" to enc, "v" to "1.0", "exp" to t.toString())
            val s = Signing.v2Signature(acc.secret, Signing.v2Canonical(params))
            b.encodedPath("/v2/d")
            for ((k, v) in params) b.addQueryParameter(k, v)
            return b.addQueryParameter("s", s).build()
        }
        return b.encodedPath("/${acc.id}/sign_resolve").addQueryParameter("host", host).addQueryParameter("query", q)
            .addQueryParameter("labels", "1").addQueryParameter("t", t.toString())
            .addQueryParameter("s", Signing.signResolve(host, acc.secret, t)).build()
    }

    private fun ask(base: HttpUrl, names: List<String>, stack: IpStack): Attempt {
        val url = url(base, names, stack)
        val call = http.newCall(Request.Builder().url(url).header("Accept", "application/json").build())
        call.timeout().timeout(timeoutMs, TimeUnit.MILLISECONDS)
        try {
            call.execute().use { resp ->
                val body = resp.body?.string() ?: ""
                val code = resp.code
                if (code == 502) {
                    val isOurs = try { Json.parseObject(body).containsKey("code") } catch (e: Exception) { false }
                    return if (isOurs) Attempt.Refused("status 502: ${body.trim()}") else Attempt.Retry(Fault.SERVER, "status 502")
                }
                if (code >= 500 || code == 429) return Attempt.Retry(Fault.SERVER, "status $code")
                if (code !in 200..299) return Attempt.Refused("status $code: ${body.trim()}")
                return try {
                    val answers = if (url.encodedPath == "/v2/d") parseV2(body) else Answers.parseResolve(body)
                    if (names.size == 1 && answers.isNotEmpty() && !answers.containsKey(names[0])) {
                        // One name asked: the entry is its answer whatever case the server echoed.
                        Attempt.Ok(mapOf(names[0] to answers.values.first()))
                    } else Attempt.Ok(answers)
                } catch (e: Exception) {
                    Attempt.Retry(Fault.SERVER, "malformed answer: ${e.message}")
                }
            }
        } catch (e: InterruptedIOException) {
            return Attempt.Retry(Fault.TIMEOUT, e.toString())
        } catch (e: IOException) {
            return Attempt.Retry(Fault.CONNECT, e.toString())
        }
    }

    private fun parseV2(body: String): Map<String, ServiceAnswer> {
        val m = Json.parseObject(body)
        val acc = account ?: throw IOException("no account")
        val data: Map<String, Any?> = when (val d = m["data"]) {
            is String -> {
                val key = V2Cipher.key(acc.aesKeyHex ?: "") ?: throw IOException("no AES key")
                val mode = m.long("mode")?.toInt() ?: V2Cipher.GCM
                val sealed = Codec.unbase64(d) ?: throw IOException("data is not base64")
                Json.parseObject(String(V2Cipher.open(mode, key, sealed), Charsets.UTF_8))
            }
            else -> Json.asObject(d) ?: throw IOException("no data")
        }
        return Answers.parseV2Data(data)
    }

    /**
     * `GET /{account}/ss` (or `/ss`): the service's current entry points. Returns the new address
     * list (the service's addresses, then the configured ones as a last resort), or null on failure.
     */
    fun refreshServiceIps(): List<HttpUrl>? {
        val list = servers.ifEmpty { bootstrap }
        for (base in list) {
            val path = if (account != null) "/${account.id}/ss" else "/ss"
            val call = http.newCall(Request.Builder().url(base.newBuilder().encodedPath(path).query(null).build()).build())
            call.timeout().timeout(timeoutMs, TimeUnit.MILLISECONDS)
            val body = try {
                call.execute().use { r -> if (r.isSuccessful) r.body?.string() else null }
            } catch (e: IOException) { null } ?: continue
            val fresh = try { Answers.parseServiceIps(body, base) } catch (e: Exception) { null } ?: continue
            val merged = (fresh + bootstrap).distinct()
            servers = merged
            preferred.set(0)
            synchronized(lock) { allFailedAt = null }
            return merged
        }
        return null
    }
}

/** Parsers of the service's answers (shared with the vectors tests). */
internal object Answers {
    /** `/resolve` JSON: one entry with `ips` + `ipsv6`, or per-type entries (`type` 1 / 28) in a batch. */
    fun parseResolve(body: String): Map<String, ServiceAnswer> {
        val m = Json.parseObject(body)
        val dns = Json.asList(m["dns"]) ?: throw IllegalArgumentException("answer without dns")
        if (dns.isEmpty()) throw IllegalArgumentException("answer without an entry")
        val v4 = LinkedHashMap<String, MutableList<String>>()
        val v6 = LinkedHashMap<String, MutableList<String>>()
        val ttl = HashMap<String, Long>()
        val clientIsp = HashMap<String, String?>()
        val labels = HashMap<String, MutableMap<String, String>>()
        for (e in dns) {
            val o = Json.asObject(e) ?: continue
            val host = (o.str("host") ?: "").lowercase().removeSuffix(".")
            val type = o.long("type")
            val ips = o.strings("ips").mapNotNull { canonicalIp(it) }
            if (type == 28L) v6.getOrPut(host) { ArrayList() }.addAll(ips) else v4.getOrPut(host) { ArrayList() }.addAll(ips)
            v6.getOrPut(host) { ArrayList() }.addAll(o.strings("ipsv6").mapNotNull { canonicalIp(it) })
            val t = o.long("ttl") ?: 0
            ttl[host] = if (ttl.containsKey(host)) Math.min(ttl[host]!!, t) else t
            if (o.str("client_isp") != null) clientIsp[host] = o.str("client_isp")
            o.obj("ip_isp")?.forEach { (k, v) -> if (v is String) canonicalIp(k)?.let { labels.getOrPut(host) { HashMap() }[it] = v } }
        }
        val out = LinkedHashMap<String, ServiceAnswer>()
        for (host in (v4.keys + v6.keys).distinct()) {
            out[host] = ServiceAnswer(
                (v4[host] ?: emptyList<String>()) + (v6[host] ?: emptyList<String>()),
                ttl[host] ?: 0, clientIsp[host], labels[host] ?: emptyMap(),
            )
        }
        return out
    }

    /** `/v2/d`'s `data` object (plain, or opened from mode 1/2). */
    fun parseV2Data(data: Map<String, Any?>): Map<String, ServiceAnswer> {
        val out = LinkedHashMap<String, ServiceAnswer>()
        for (a in data.list("answers")) {
            val o = Json.asObject(a) ?: continue
            val dn = (o.str("dn") ?: continue).lowercase().removeSuffix(".")
            val f4 = o.obj("v4")
            val f6 = o.obj("v6")
            val ips = (f4?.strings("ips") ?: emptyList()).mapNotNull { canonicalIp(it) } +
                (f6?.strings("ips") ?: emptyList()).mapNotNull { canonicalIp(it) }
            val ttls = listOfNotNull(f4?.long("ttl"), f6?.long("ttl"))
            out[dn] = ServiceAnswer(ips, ttls.minOrNull() ?: 0, null, emptyMap())
        }
        return out
    }

    /**
     * DNSPod `/d` text (`type=addrs&ttl=1[&clientip=1][&query=1]`), one line per name:
     * `[name.:]ip;ip[,ttl][-ip;ip[,ttl]][|clientip]`. Names come from `query` echoes, else `asked` in order.
     */
    fun parseD(body: String, asked: List<String>): Map<String, ServiceAnswer> {
        val out = LinkedHashMap<String, ServiceAnswer>()
        val lines = body.split('\n').map { it.trim() }.filter { it.isNotEmpty() }
        lines.forEachIndexed { i, raw ->
            var line = raw
            var name: String? = null
            val colon = line.indexOf(".:")
            if (colon > 0 && !line.substring(0, colon).contains(';')) {
                name = line.substring(0, colon)
                line = line.substring(colon + 2)
            }
            line = line.substringBefore('|')
            val ips = ArrayList<String>()
            var ttl: Long? = null
            for (part in line.split('-')) {
                val list = part.substringBefore(',')
                part.substringAfter(',', "").toLongOrNull()?.let { ttl = if (ttl == null) it else Math.min(ttl!!, it) }
                for (ip in list.split(';')) if (ip != "0") canonicalIp(ip)?.let { ips.add(it) }
            }
            val key = (name ?: asked.getOrNull(i) ?: return@forEachIndexed).lowercase()
            out[key] = ServiceAnswer(ips, ttl ?: 0, null, emptyMap())
        }
        return out
    }

    /** `/ss`: `service_ip` (+ports) then `service_ipv6` (+ports), as base URLs with `base`'s scheme. */
    fun parseServiceIps(body: String, base: HttpUrl): List<HttpUrl> {
        val m = Json.parseObject(body)
        val out = ArrayList<HttpUrl>()
        fun add(ips: List<String>, ports: List<Any?>) {
            ips.forEachIndexed { i, ip ->
                val canon = canonicalIp(ip) ?: return@forEachIndexed
                val port = (ports.getOrNull(i) as? Number)?.toInt() ?: 0
                val b = HttpUrl.Builder().scheme(base.scheme).host(canon)
                if (port in 1..65535) b.port(port)
                out.add(b.build())
            }
        }
        add(m.strings("service_ip"), m.list("service_ip_port"))
        add(m.strings("service_ipv6"), m.list("service_ipv6_port"))
        return out
    }

    fun canonicalIp(s: String): String? {
        val ip = IpFilter.parse(s) ?: return null
        return IpFilter.text(ip)
    }

    fun parseBase(url: String): HttpUrl? = url.toHttpUrlOrNull()
}
