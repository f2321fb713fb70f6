package io.httpdns.android

import okhttp3.ConnectionPool
import okhttp3.Dns
import okhttp3.EventListener
import okhttp3.HttpUrl
import okhttp3.Interceptor
import okhttp3.OkHttpClient
import okhttp3.Request
import java.io.File
import java.net.InetAddress
import java.net.UnknownHostException
import java.util.concurrent.ExecutorService
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.ScheduledThreadPoolExecutor
import java.util.concurrent.ThreadFactory
import java.util.concurrent.ThreadPoolExecutor
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

/**
 * The httpdns SDK for OkHttp apps: HTTPDNS resolution ([dns]), CDN host convergence and failover
 * ([interceptor]), the signed config document, and events, as the Rust client does them
 * (`docs/client.md`). Build one per process and share it:
 *
 * ```java
 * HttpDns httpDns = HttpDns.builder()
 *     .serviceUrls(Arrays.asList("http://203.0.113.10:8080", "http://203.0.113.11:8080"))
 *     .deviceId(deviceId).configUrl("http://203.0.113.10:8080").configPublicKey(KEY)
 *     .cacheDir(context.getCacheDir()).build();
 * OkHttpClient client = httpDns.install(new OkHttpClient.Builder()).build();
 * ```
 */
class HttpDns private constructor(b: Builder) : AutoCloseable {
    internal val clock: Clock = b.clock
    internal val deviceId: String = b.deviceId
    internal val replayNonIdempotent: Boolean = b.replayNonIdempotent
    private val segment: String? = b.segment
    private val reviveOverrideMs: Long? = b.reviveIntervalMs
    private val network: NetworkMonitor = b.networkMonitor ?: NetworkMonitor.Fixed("default")
    private val stackDetector: IpStackDetector = b.ipStackDetector ?: IpStackDetector.ROUTES
    private val threadId = AtomicInteger()
    private val threads = ThreadFactory { r -> Thread(r, "httpdns-${threadId.incrementAndGet()}").apply { isDaemon = true } }
    internal val executor: ExecutorService = ThreadPoolExecutor(0, 64, 30, TimeUnit.SECONDS, java.util.concurrent.SynchronousQueue(), threads, ThreadPoolExecutor.CallerRunsPolicy())
    private val scheduler = ScheduledThreadPoolExecutor(1, threads)
    private val connectionPool = ConnectionPool()
    private val http: OkHttpClient = (b.baseClient ?: OkHttpClient()).newBuilder()
        .connectTimeout(b.timeoutMs, TimeUnit.MILLISECONDS).readTimeout(10, TimeUnit.SECONDS)
        .retryOnConnectionFailure(false).build()
    private val account: Account? = b.accountId?.let { Account(it, b.accountSecret ?: "", b.aesKey) }
    internal val service: Service
    // Internal, not private: the module's tests wait on its cache rather than on time.
    internal val resolver: Resolver
    private val config: ConfigStore?
    internal val hostPool: HostPool
    internal val netCheck: NetworkCheck
    internal val reporter: Reporter?
    private val feedback: Reporter?
    private val dns: Dns
    private val interceptor: Interceptor
    private val probeHttp: OkHttpClient
    @Volatile private var hostsVersion = Long.MIN_VALUE
    @Volatile internal var networkGeneration = 0
    @Volatile private var closed = false
    private val poller: Thread?
    private val preResolveList: List<String> = b.preResolveHosts
    private val refreshServiceIps: Boolean = b.refreshServiceIps
    private val localDns: Dns = b.localDns
    private val networkListener = NetworkMonitor.Listener { onNetworkChanged(it) }
    @Volatile private var lastNetworkKey: String = network.networkKey()

    init {
        val bootstrap = b.serviceUrls.map { Answers.parseBase(it) ?: throw IllegalArgumentException("service URL $it") }
        service = Service(bootstrap, account, http, b.timeoutMs, b.sniffIntervalMs, clock) { System.currentTimeMillis() / 1000 }
        val cacheDir = b.cacheDir
        val opts = ResolverOptions(
            allowPrivate = b.allowPrivate, reuseExpired = b.reuseExpired, maxStaleMs = 24 * 3600_000L,
            minTtlMs = 10_000, maxTtlMs = 3600_000, localTtlMs = 30_000, localTimeoutMs = b.timeoutMs,
            cacheFile = cacheDir?.let { File(it, "httpdns-cache.json") },
            denyHosts = b.denyHosts.map { it.lowercase() }, allowHosts = b.allowHosts.map { it.lowercase() },
            localDnsSampleRate = b.localDnsSampleRate,
        )
        config = if (b.configUrl != null || b.defaultConfig != null) {
            ConfigStore(
                b.configUrl?.let { ConfigStore.moduleUrl(it) ?: throw IllegalArgumentException("config URL $it") },
                b.configPublicKey, cacheDir?.let { File(it, "httpdns-config.json") }, b.defaultConfig, http, deviceId, segment, b.appVersion,
            )
        } else null
        resolver = Resolver(opts, service, b.localDns, network, b.carrierProvider, clock, executor) { policy() }
        hostPool = HostPool(emptyList(), b.ejectionPolicy, clock.millis())
        netCheck = NetworkCheck(b.networkProbePort, 3000, 2000, clock, executor)
        val eventUrls: List<HttpUrl> = b.eventsUrl?.let { listOfNotNull(Answers.parseBase(it)) }
            ?: bootstrap.map { it.newBuilder().encodedPath("/app/events").query(null).build() }
        reporter = if (!b.events || eventUrls.isEmpty()) null else Reporter(
            eventUrls, account, http, scheduler, 50, b.eventsIntervalMs, 1000, b.requestSampleRate,
            cacheDir?.let { File(it, "httpdns-events.json") }, 300_000, { System.currentTimeMillis() / 1000 },
        )
        // Connection reports for the server's live scores, batched like the events (at most one
        // send per 30 s: the server takes 5 requests a second per client).
        feedback = if (!b.feedback || bootstrap.isEmpty()) null else Reporter(
            bootstrap.map { it.newBuilder().encodedPath("/feedback").query(null).build() }, account, http, scheduler,
            100, b.eventsIntervalMs, 500, 0.0, null, 300_000, { System.currentTimeMillis() / 1000 }, "reports", false,
        )
        resolver.reporter = reporter
        dns = object : Dns {
            override fun lookup(hostname: String): List<InetAddress> = this@HttpDns.lookup(hostname).addresses
        }
        interceptor = MergeHostInterceptor(this)
        probeHttp = http.newBuilder().dns(dns).build()
        service.onAllFailed = { if (b.refreshServiceIps) executor.execute { service.refreshServiceIps() } }
        network.register(networkListener)
        reporter?.start()
        feedback?.start()
        // Start-up work, off the caller's thread: the stack, the service IPs, the config, pre-resolve.
        executor.execute {
            resolver.stack = try { stackDetector.stack() } catch (e: Exception) { IpStack.DUAL }
            if (b.refreshServiceIps && bootstrap.isNotEmpty()) service.refreshServiceIps()
            if (config?.let { try { it.refresh(); true } catch (e: Exception) { false } } != null) syncHosts()
            preResolve()
        }
        if (b.refreshServiceIps && bootstrap.isNotEmpty()) {
            scheduler.scheduleWithFixedDelay({ executor.execute { service.refreshServiceIps() } }, 8, 8, TimeUnit.HOURS)
        }
        scheduler.scheduleWithFixedDelay({ executor.execute { probeDisabledHosts() } }, 200, Math.min(1000, Math.max(10, reviveOverrideMs ?: 1000)), TimeUnit.MILLISECONDS)
        poller = if (config != null && b.configUrl != null) Thread({ pollLoop(b.configIntervalMs, b.longPollSeconds) }, "httpdns-config").apply { isDaemon = true; start() } else null
    }

    /** The resolver to give OkHttp (`OkHttpClient.Builder.dns`). */
    fun dns(): Dns = dns

    /** The `MergeHostInterceptor`: convergence, host failover, the original URL last. */
    fun interceptor(): Interceptor = interceptor

    /**
     * Both at once, and the SDK's connection pool (evicted on a network change, so a long-lived
     * client does not keep the old network's connections). Adds the interceptor once only.
     */
    fun install(builder: OkHttpClient.Builder): OkHttpClient.Builder {
        builder.dns(dns).connectionPool(connectionPool)
        if (builder.interceptors().none { it is MergeHostInterceptor }) builder.addInterceptor(interceptor)
        return builder
    }

    /** Resolves `host`: the addresses and the path that answered. Blocking; throws when nothing answered. */
    @Throws(UnknownHostException::class)
    fun lookup(host: String): Resolution {
        if (closed) {
            // A client built with a closed SDK keeps working on the fallback resolver.
            return Resolution(host, localDns.lookup(host), 30_000, ResolutionPath.LOCALDNS, emptyList(), "HttpDns is closed")
        }
        return resolver.resolve(host)
    }

    /**
     * OkHttp's `EventListener` of connection reports to the server's `/feedback` (each connection to
     * an address of a name: success and connect time, or failure): `builder.eventListenerFactory(
     * httpDns.eventListenerFactory())`. Not set by [install], which would replace the app's own.
     */
    fun eventListenerFactory(): EventListener.Factory = EventListener.Factory { FeedbackListener(this) }

    /** Sends every waiting event (and feedback report) now (blocking; call it off the main thread). True when all went. */
    fun flushEvents(): Boolean {
        val events = reporter?.sendAll() == null
        val reports = feedback?.sendAll() == null
        return events && reports
    }

    internal fun recordFeedback(domain: String, ip: String, ok: Boolean, connectMs: Long) {
        val f = feedback ?: return
        val r = linkedMapOf<String, Any?>("ip" to ip, "domain" to domain, "ok" to ok)
        if (ok) r["connect_ms"] = Math.min(60_000, Math.max(0, connectMs))
        val key = network.networkKey()
        if (key.startsWith("wifi")) r["network"] = "wifi" else if (key.startsWith("cellular")) r["network"] = "cellular"
        f.record(r)
    }

    /** What was recorded, sent, queued, dropped and refused; null when events are off. */
    fun eventStats(): EventStats? = reporter?.stats()

    /** The config version in force, -1 without a document. */
    fun configVersion(): Long = config?.current()?.version ?: -1

    /** Hosts in failover order and whether each is disabled now. */
    fun hostStates(): Map<String, Boolean> {
        syncHosts()
        return hostPool.hosts().associateWith { hostPool.isDisabled(it) }
    }

    /** A signed config document from another channel (a push); true when it is now in force. */
    @Throws(java.io.IOException::class)
    fun offerConfig(body: String, signature: String): Boolean {
        val c = config ?: return false
        return c.offer(body, signature).also { syncHosts() }
    }

    /** Stops background work, keeps the event queue on disk. Idempotent. */
    override fun close() {
        if (closed) return
        closed = true
        network.unregister(networkListener)
        reporter?.close()
        feedback?.close()
        poller?.interrupt()
        config?.cancel()
        scheduler.shutdownNow()
        executor.shutdownNow()
        resolver.close()
        connectionPool.evictAll()
    }

    internal fun policy(): ResolutionDecision {
        val c = config ?: return ResolutionDecision.DEFAULT
        val d = c.decision ?: c.current()?.doc?.resolutionFor(segment, deviceId) ?: ResolutionDecision.DEFAULT
        if (d.timeoutMs > 0) service.timeoutMs = d.timeoutMs
        // Only a server with a resolution policy knows these fields (CONTRACT, third round); an
        // older one refuses a batch that carries them.
        reporter?.httpdnsEnabled = if (d === ResolutionDecision.DEFAULT) null else d.httpdns
        return d
    }

    internal fun reviveIntervalMs(): Long = reviveOverrideMs ?: config?.current()?.doc?.reviveProbeIntervalMs ?: 600_000

    /** Rebuilds the host pool when the config version changed; the config in force. */
    internal fun syncHosts(): ConfigStore.Active? {
        val cfg = config?.current() ?: return null
        synchronized(hostPool) {
            reporter?.convergence = cfg.doc.convergenceEnabled(deviceId)
            reporter?.configVersion = if (cfg.doc.resolution != null || cfg.doc.resolutionPolicy != null) cfg.version else null
            if (hostsVersion != cfg.version) {
                hostPool.setHosts(Convergence.hostList(cfg.doc, deviceId), clock.millis())
                hostsVersion = cfg.version
            }
        }
        return cfg
    }

    internal fun evictConnections() = connectionPool.evictAll()

    private fun preResolve(more: List<String> = emptyList()) {
        val names = (preResolveList + policy().preResolveHosts + more).distinct()
        if (names.isNotEmpty()) try { resolver.preResolve(names) } catch (e: Exception) { /* lookups fall back later */ }
    }

    /** A new network: its own cache key, the old network's connections evicted, the names in use re-resolved. */
    private fun onNetworkChanged(newKey: String) {
        if (closed) return
        val old = lastNetworkKey
        lastNetworkKey = newKey
        networkGeneration++
        evictConnections()
        executor.execute {
            resolver.stack = try { stackDetector.stack() } catch (e: Exception) { IpStack.DUAL }
            if (refreshServiceIps) service.refreshServiceIps()
            // The names in use (at most 50: ten batch requests), not the whole cache.
            preResolve(if (old == newKey) emptyList() else resolver.cache.names(old, 50))
        }
    }

    /** One round of `HEAD` probes of disabled hosts that are due; how many came back. */
    internal fun probeDisabledHosts(): Int {
        if (closed) return 0
        syncHosts()
        var revived = 0
        for ((host, url) in hostPool.dueProbes(clock.millis())) {
            val ok = try {
                probeHttp.newCall(Request.Builder().url(url).head().build()).execute().use { it.isSuccessful }
            } catch (e: Exception) { false }
            if (ok) {
                revived++
                reporter?.record(Events.hostRevive(host))
            }
            hostPool.probeResult(host, ok, clock.millis(), reviveIntervalMs())
        }
        return revived
    }

    /** Polls the config center: the per-device POST every interval, the long poll in between where offered. */
    private fun pollLoop(intervalOverrideMs: Long?, longPollSeconds: Int) {
        var longPoll = longPollSeconds > 0
        var failures = 0
        while (!closed) {
            val interval = intervalOverrideMs ?: config?.current()?.doc?.configRequestIntervalMs ?: 600_000
            val deadline = clock.millis() + interval
            try {
                while (!closed && clock.millis() < deadline) {
                    if (!longPoll) {
                        Thread.sleep(Math.max(1, deadline - clock.millis()))
                        break
                    }
                    val wait = Math.min(longPollSeconds.toLong(), Math.max(1, (deadline - clock.millis()) / 1000)).toInt()
                    val t0 = clock.millis()
                    val r = config!!.poll(wait)
                    if (r == ConfigStore.Refresh.UPDATED) {
                        syncHosts()
                        if (deviceId.isNotEmpty()) config.refresh()
                        preResolve()
                    } else if (r == ConfigStore.Refresh.NOT_MODIFIED && wait >= 2 && clock.millis() - t0 < wait * 500L) {
                        // The server answered at once: it does not hold requests; plain polling from now on.
                        longPoll = false
                    }
                    failures = 0
                }
                if (closed) return
                if (config!!.refresh() == ConfigStore.Refresh.UPDATED) { syncHosts(); preResolve() }
                failures = 0
            } catch (e: InterruptedException) {
                return
            } catch (e: Exception) {
                failures++
                try { Thread.sleep(Math.min(interval, 1000L shl Math.min(failures, 8))) } catch (ie: InterruptedException) { return }
            }
        }
    }

    /** Builds an [HttpDns]. Every setter returns this builder; [build] may be called once per SDK instance. */
    class Builder internal constructor() {
        @JvmField internal var serviceUrls: List<String> = emptyList()
        @JvmField internal var accountId: String? = null
        @JvmField internal var accountSecret: String? = null
        @JvmField internal var aesKey: String? = null
        @JvmField internal var deviceId: String = ""
        @JvmField internal var configUrl: String? = null
        @JvmField internal var configPublicKey: String? = null
        @JvmField internal var defaultConfig: String? = null
        @JvmField internal var cacheDir: File? = null
        @JvmField internal var preResolveHosts: List<String> = emptyList()
        @JvmField internal var localDns: Dns = Dns.SYSTEM
        @JvmField internal var allowPrivate: Boolean = false
        @JvmField internal var segment: String? = null
        @JvmField internal var appVersion: String? = null
        @JvmField internal var networkMonitor: NetworkMonitor? = null
        @JvmField internal var carrierProvider: CarrierProvider? = null
        @JvmField internal var ipStackDetector: IpStackDetector? = null
        @JvmField internal var ejectionPolicy: EjectionPolicy = EjectionPolicy.SEED
        @JvmField internal var allowHosts: List<String> = emptyList()
        @JvmField internal var denyHosts: List<String> = emptyList()
        @JvmField internal var reuseExpired: Boolean = true
        @JvmField internal var timeoutMs: Long = 2000
        @JvmField internal var sniffIntervalMs: Long = 30_000
        @JvmField internal var events: Boolean = true
        @JvmField internal var feedback: Boolean = true
        @JvmField internal var eventsUrl: String? = null
        @JvmField internal var eventsIntervalMs: Long = 30_000
        @JvmField internal var requestSampleRate: Double = 0.01
        @JvmField internal var localDnsSampleRate: Double = 0.01
        @JvmField internal var reviveIntervalMs: Long? = null
        @JvmField internal var configIntervalMs: Long? = null
        @JvmField internal var longPollSeconds: Int = 30
        @JvmField internal var networkProbePort: Int = 53
        @JvmField internal var refreshServiceIps: Boolean = true
        @JvmField internal var replayNonIdempotent: Boolean = false
        @JvmField internal var baseClient: OkHttpClient? = null
        @JvmField internal var clock: Clock = Clock.SYSTEM

        /** Base URLs of the HTTPDNS service (`http://203.0.113.10:8080`), in order of preference. */
        fun serviceUrls(urls: List<String>) = apply { serviceUrls = urls.toList() }

        /** The account for signed requests (`sign_resolve`, signed events). */
        fun account(id: String, secret: String) = apply { accountId = id; accountSecret = secret }

        /** The account's AES key (hex): lookups then use `/v2/d` with AES-GCM and the HMAC signature. */
        fun aesKey(hex: String?) = apply { aesKey = hex }

        /** The stable id the config center buckets this device by (never sent in events). */
        fun deviceId(id: String) = apply { deviceId = id }

        /** The config center: a base URL (module `cdn`) or the full module-config URL. */
        fun configUrl(url: String?) = apply { configUrl = url }

        /** The config center's Ed25519 public key (base64), pinned in the app. */
        fun configPublicKey(key: String?) = apply { configPublicKey = key }

        /** The document shipped with the app (trusted as it is: it comes with the app). */
        fun defaultConfig(json: String?) = apply { defaultConfig = json }

        /** Where the DNS cache, the kept config and the event queue live (files written atomically). */
        fun cacheDir(dir: File?) = apply { cacheDir = dir }

        /** Names resolved at start in batch requests (5 names per request, the service's limit). */
        fun preResolveHosts(hosts: List<String>) = apply { preResolveHosts = hosts.toList() }

        /** The fallback resolver; the system's by default. */
        fun localDns(dns: Dns) = apply { localDns = dns }

        /** Accept loopback and private answers (intranets, tests on loopback). */
        fun allowPrivateAddresses(allow: Boolean) = apply { allowPrivate = allow }

        /** The device's segment for the resolution policy (`segments` in `resolutionPolicy`). */
        fun segment(segment: String?) = apply { this.segment = segment }

        /** The app's version, sent to the config center for targeting. */
        fun appVersion(version: String?) = apply { appVersion = version }

        fun networkMonitor(monitor: NetworkMonitor?) = apply { networkMonitor = monitor }
        fun carrierProvider(provider: CarrierProvider?) = apply { carrierProvider = provider }
        fun ipStackDetector(detector: IpStackDetector?) = apply { ipStackDetector = detector }
        fun ejectionPolicy(policy: EjectionPolicy) = apply { ejectionPolicy = policy }

        /** When not empty, only these names (exact or `*.suffix`) use HTTPDNS. */
        fun allowHosts(hosts: List<String>) = apply { allowHosts = hosts.toList() }

        /** Names (exact or `*.suffix`) that never use HTTPDNS. */
        fun denyHosts(hosts: List<String>) = apply { denyHosts = hosts.toList() }

        /** Reuse expired answers while refreshing them (default on). */
        fun reuseExpired(reuse: Boolean) = apply { reuseExpired = reuse }

        /** Per service request and for LocalDNS, in milliseconds (2000). */
        fun timeoutMs(ms: Long) = apply { timeoutMs = ms }

        /** Events to `/app/events` (on by default). */
        fun events(enabled: Boolean) = apply { events = enabled }
        fun eventsUrl(url: String?) = apply { eventsUrl = url }

        /** Connection reports to `/feedback` through [eventListenerFactory] (on by default). */
        fun feedback(enabled: Boolean) = apply { feedback = enabled }
        fun eventsIntervalMs(ms: Long) = apply { eventsIntervalMs = ms }
        fun requestSampleRate(rate: Double) = apply { requestSampleRate = rate }
        fun localDnsSampleRate(rate: Double) = apply { localDnsSampleRate = rate }

        /** Overrides the document's `reviveProbeInterval` (drills, tests). */
        fun reviveIntervalMs(ms: Long) = apply { reviveIntervalMs = ms }

        /** Overrides the document's `configRequestInterval`. */
        fun configIntervalMs(ms: Long) = apply { configIntervalMs = ms }

        /** The long poll's `wait` in seconds (30; 0: plain polling). */
        fun longPollSeconds(seconds: Int) = apply { longPollSeconds = seconds }

        /** The port of `publicIpList` addresses for the network check (53). */
        fun networkProbePort(port: Int) = apply { networkProbePort = port }

        /** Refresh the service addresses from `/ss` (at start, on network change, after all failed, every 8 h). */
        fun refreshServiceIps(refresh: Boolean) = apply { refreshServiceIps = refresh }

        /** Replay bodies of non-idempotent requests on the next host even after they went out. */
        fun replayNonIdempotent(replay: Boolean) = apply { replayNonIdempotent = replay }

        /** The client whose dispatcher and settings the SDK's own requests start from. */
        fun baseClient(client: OkHttpClient?) = apply { baseClient = client }

        fun clock(clock: Clock) = apply { this.clock = clock }

        fun build(): HttpDns = HttpDns(this)
    }

    companion object {
        @JvmStatic
        fun builder(): Builder = Builder()
    }
}
