package io.httpdns.android

import okhttp3.Dns
import java.io.File
import java.net.InetAddress
import java.net.UnknownHostException
import java.util.concurrent.Callable
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.ExecutorService
import java.util.concurrent.Future
import java.util.concurrent.TimeUnit
import java.util.concurrent.TimeoutException

/** What the resolver needs to know, fixed at build time. */
internal class ResolverOptions(
    val allowPrivate: Boolean,
    val reuseExpired: Boolean,
    val maxStaleMs: Long,
    val minTtlMs: Long,
    val maxTtlMs: Long,
    val localTtlMs: Long,
    val localTimeoutMs: Long,
    val cacheFile: File?,
    /** Names (exact, or `*.suffix`) that never use HTTPDNS. */
    val denyHosts: List<String>,
    /** When not empty, only these names use HTTPDNS. */
    val allowHosts: List<String>,
    val localDnsSampleRate: Double,
)

/**
 * The resolver (`httpdns_client::resolver`): the per-network cache (refreshed in the background
 * past 75% of the TTL, expired answers reused while refreshing), the service, the filters, then
 * LocalDNS, then a stale answer as the last resort. Concurrent misses of one name make one request;
 * each lookup runs on the SDK's executor, so a cancelled call harms no one waiting for the same name.
 */
internal class Resolver(
    private val opts: ResolverOptions,
    val service: Service,
    private val localDns: Dns,
    private val network: NetworkMonitor,
    private val carrier: CarrierProvider?,
    private val clock: Clock,
    private val executor: ExecutorService,
    private val policy: () -> ResolutionDecision,
) {
    val cache: DnsCache = DnsCache.load(opts.cacheFile, clock.millis(), System.currentTimeMillis(), opts.maxStaleMs)
    private val inflight = ConcurrentHashMap<String, Future<Resolution>>()
    @Volatile
    var reporter: Reporter? = null
    @Volatile
    var stack: IpStack = IpStack.DUAL
        get() {
            // The first detection runs off the app's thread at start; a lookup racing it waits briefly.
            if (stackKnown.count > 0) try { stackKnown.await(200, TimeUnit.MILLISECONDS) } catch (e: InterruptedException) { Thread.currentThread().interrupt() }
            return field
        }
        set(value) {
            field = value
            stackKnown.countDown()
        }
    private val stackKnown = java.util.concurrent.CountDownLatch(1)
    private val cacheWrite = Any()
    private var closed = false

    /** No file write after this returns (one in progress is waited for). */
    fun close() = synchronized(cacheWrite) { closed = true }

    fun networkKey(): String = network.networkKey()

    private fun matches(name: String, patterns: List<String>) = patterns.any { p ->
        if (p.startsWith("*.")) name.endsWith(p.substring(1)) else name == p
    }

    /** Whether `name` goes through HTTPDNS at all (allow and deny lists). */
    fun usesHttpDns(name: String): Boolean =
        !matches(name, opts.denyHosts) && (opts.allowHosts.isEmpty() || matches(name, opts.allowHosts))

    fun resolve(host: String): Resolution {
        val raw = host.trim().removeSuffix(".")
        IpFilter.parse(raw)?.let { return Resolution(raw, listOf(it), Long.MAX_VALUE, ResolutionPath.LITERAL, emptyList(), null) }
        val name = validName(raw) ?: throw UnknownHostException("$host: not a valid host name")
        val decision = policy()
        if (!usesHttpDns(name) || !decision.httpdns || !service.isConfigured()) {
            val why = if (!service.isConfigured()) "no service address configured" else if (!decision.httpdns) "HTTPDNS is off for this device (resolutionPolicy)" else "the name is not on the HTTPDNS lists"
            return local(name, why) ?: throw UnknownHostException("$name: LocalDNS gave no usable address ($why)")
        }
        val net = network.networkKey()
        cached(net, name)?.let { return it }
        val key = "$net\u0000$name"
        // putIfAbsent, not computeIfAbsent (API 24).
        val mine = java.util.concurrent.FutureTask(Callable { try { lookup(net, name) } finally { inflight.remove(key) } })
        val task = inflight.putIfAbsent(key, mine) ?: mine.also { executor.execute(it) }
        try {
            return task.get(lookupBoundMs(), TimeUnit.MILLISECONDS)
        } catch (e: TimeoutException) {
            throw UnknownHostException("$name: no answer within ${lookupBoundMs()} ms")
        } catch (e: java.util.concurrent.ExecutionException) {
            val c = e.cause
            if (c is UnknownHostException) throw c
            throw UnknownHostException("$name: ${c ?: e}")
        } catch (e: InterruptedException) {
            Thread.currentThread().interrupt()
            throw UnknownHostException("$name: interrupted")
        }
    }

    private fun lookupBoundMs(): Long =
        service.timeoutMs * Math.max(1, service.servers().size) + opts.localTimeoutMs + 1000

    private fun cached(net: String, name: String): Resolution? {
        val now = clock.millis()
        val (ips, ttl, path, refresh) = when (val l = cache.lookup(net, name, now)) {
            is DnsCache.Lookup.Fresh -> Quad(l.ips, l.remainingMs, ResolutionPath.CACHE, l.refresh)
            is DnsCache.Lookup.Expired -> {
                if (opts.reuseExpired && l.ageMs <= opts.maxStaleMs) Quad(l.ips, 0L, ResolutionPath.STALE, l.refresh)
                else {
                    if (l.refresh) cache.refreshReleased(net, name)
                    return null
                }
            }
            DnsCache.Lookup.Miss -> return null
        }
        if (refresh) {
            executor.execute {
                val r = askService(net, listOf(name))
                if (r[name] == null) cache.refreshFailed(net, name, clock.millis())
            }
        }
        return Resolution(name, ordered(ips.mapNotNull { IpFilter.parse(it) }), ttl, path, emptyList(), null)
    }

    // Not a data class: its generated hashCode calls Long.hashCode(long), which API 21 lacks.
    private class Quad(val ips: List<String>, val ttl: Long, val path: ResolutionPath, val refresh: Boolean) {
        operator fun component1() = ips
        operator fun component2() = ttl
        operator fun component3() = path
        operator fun component4() = refresh
    }

    /** Service, then (policy allowing) LocalDNS, then an expired answer, then an error; a fallback is reported. */
    private fun lookup(net: String, name: String): Resolution {
        val started = clock.millis()
        val outcome = askService(net, listOf(name))
        outcome[name]?.let { return it }
        val (reason, error) = outcome.failure ?: (null to "no answer")
        val decision = policy()
        val result = if (decision.localDnsFallback) local(name, error, net) else null
        val final = result ?: staleOrNull(net, name, error)
        if (reason != null) reporter?.record(Events.dnsFallback(name, reason, clock.millis() - started))
        if (final != null) return final
        val localText = if (decision.localDnsFallback) "LocalDNS gave no usable address" else "LocalDNS fallback is off (resolutionPolicy)"
        throw UnknownHostException("$name: HTTPDNS: $error; $localText")
    }

    private fun staleOrNull(net: String, name: String, error: String): Resolution? {
        val l = cache.lookup(net, name, clock.millis())
        if (l is DnsCache.Lookup.Expired) {
            if (l.refresh) cache.refreshReleased(net, name)
            return Resolution(name, ordered(l.ips.mapNotNull { IpFilter.parse(it) }), 0, ResolutionPath.STALE, emptyList(), error)
        }
        if (l is DnsCache.Lookup.Fresh && l.refresh) cache.refreshReleased(net, name)
        return null
    }

    /** LocalDNS, bounded by its timeout; its answers pass the filters and are cached for `localTtl`. */
    private fun local(name: String, serviceError: String, net: String? = null): Resolution? {
        val ips = try {
            val f = executor.submit(Callable { localDns.lookup(name) })
            try {
                f.get(opts.localTimeoutMs, TimeUnit.MILLISECONDS)
            } catch (e: TimeoutException) {
                f.cancel(true)
                null
            }
        } catch (e: Exception) {
            null
        } ?: return null
        val r = IpFilter.filter(ips, opts.allowPrivate, null, emptyMap())
        if (r.kept.isEmpty()) return null
        if (net != null) cache.insert(net, name, r.kept.map { IpFilter.text(it) }, opts.localTtlMs, clock.millis())
        return Resolution(name, ordered(r.kept), opts.localTtlMs, ResolutionPath.LOCALDNS, r.dropped.map { "${it.first}: ${it.second}" }, serviceError)
    }

    /** The outcome of one service request for several names. */
    class Outcome(private val answers: Map<String, Resolution>, val failure: Pair<String?, String>?) {
        operator fun get(name: String): Resolution? = answers[name]
    }

    /** Asks the service for `names` (one request), caches usable answers. */
    fun askService(net: String, names: List<String>): Outcome {
        val result = service.query(names, stack)
        val err = result.error
        if (err != null) {
            val reason = when (err) {
                is Unavailable.Sniffing -> reasonOf(err.fault)
                is Unavailable.Failed -> reasonOf(err.fault)
                is Unavailable.Refused -> Events.REFUSED
                Unavailable.NotConfigured -> null
            }
            return Outcome(emptyMap(), reason to err.message)
        }
        val out = HashMap<String, Resolution>()
        var failure: Pair<String?, String>? = null
        val sim = carrier?.carrier()
        for (name in names) {
            val a = result.answers!![name]
            if (a == null) {
                failure = Events.EMPTY to "the service has no address for this name"
                continue
            }
            val ips = a.ips.mapNotNull { IpFilter.parse(it) }
            maybeCompare(name, a.ips)
            val r = IpFilter.filter(ips, opts.allowPrivate, sim ?: a.clientIsp, a.ipIsp)
            if (r.kept.isEmpty()) {
                failure = Events.EMPTY to (if (r.dropped.isEmpty()) "the service has no address for this name" else "every address the service gave was dropped: ${r.dropped}")
                continue
            }
            val ttl = Math.min(opts.maxTtlMs, Math.max(opts.minTtlMs, a.ttl * 1000))
            cache.insert(net, name, r.kept.map { IpFilter.text(it) }, ttl, clock.millis())
            out[name] = Resolution(name, ordered(r.kept), ttl, ResolutionPath.HTTPDNS, r.dropped.map { "${it.first}: ${it.second}" }, null)
        }
        if (out.isNotEmpty()) saveCache()
        return Outcome(out, failure)
    }

    private fun reasonOf(f: Fault) = when (f) {
        Fault.TIMEOUT -> Events.TIMEOUT
        Fault.CONNECT -> Events.UNREACHABLE
        Fault.SERVER -> Events.ERROR
    }

    private fun saveCache() {
        val file = opts.cacheFile ?: return
        val json = cache.toJson(clock.millis(), System.currentTimeMillis())
        executor.execute {
            synchronized(cacheWrite) {
                if (!closed) try { Files.writeAtomic(file, json) } catch (e: Exception) { /* the cache is an optimisation */ }
            }
        }
    }

    /** A sampled share of service answers is compared with LocalDNS, off the caller's thread. */
    private fun maybeCompare(name: String, httpdns: List<String>) {
        val r = reporter ?: return
        if (httpdns.isEmpty() || !Events.sampled(opts.localDnsSampleRate)) return
        executor.execute {
            val local = try { localDns.lookup(name).map { IpFilter.text(it) } } catch (e: Exception) { null }
            if (local != null) r.record(Events.localDnsCompare(name, local.take(32), httpdns.take(32)))
        }
    }

    /** Pre-resolves `names` not fresh in the cache, up to 5 per request (the service's batch limit). */
    fun preResolve(names: List<String>) {
        val net = network.networkKey()
        val now = clock.millis()
        val todo = names.mapNotNull { validName(it.trim().removeSuffix(".")) }.distinct()
            .filter { usesHttpDns(it) && IpFilter.parse(it) == null }
            .filter { cache.lookup(net, it, now).let { l -> l !is DnsCache.Lookup.Fresh || l.refresh } }
        if (todo.isEmpty() || !policy().httpdns || !service.isConfigured()) return
        for (chunk in todo.chunked(5)) askService(net, chunk)
    }

    /** Addresses in the order to try: IPv6 first when the device has IPv6 only. */
    private fun ordered(ips: List<InetAddress>): List<InetAddress> =
        if (stack == IpStack.IPV6) ips.sortedBy { if (it.address.size == 16) 0 else 1 } else ips.sortedBy { if (it.address.size == 4) 0 else 1 }

    companion object {
        fun validName(raw: String): String? {
            val n = raw.lowercase()
            if (n.isEmpty() || n.length > 253) return null
            for (l in n.split('.')) {
                if (l.isEmpty() || l.length > 63) return null
                if (!l.all { it in 'a'..'z' || it in '0'..'9' || it == '-' || it == '_' }) return null
            }
            return n
        }
    }
}
