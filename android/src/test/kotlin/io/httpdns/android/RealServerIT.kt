package io.httpdns.android

import io.httpdns.android.TestKit.Server
import okhttp3.MediaType.Companion.toMediaType
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.RequestBody.Companion.toRequestBody
import okhttp3.mockwebserver.MockResponse
import org.junit.jupiter.api.AfterEach
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.net.ServerSocket
import java.util.concurrent.TimeUnit

/**
 * The outside harness: the real `httpdns` binary (`-Dhttpdns.bin`, run by the `real-server`
 * profile) and the SDK through its public entry points only (builder, `install`, `lookup`,
 * `flushEvents`): convergence, failover to the next host and to the original URL, revival,
 * LocalDNS through the app's own `localDns` (unmanaged name, wrong carrier, service down), config
 * from the bundled default and the server, and the events in `/admin/v1/events/summary`.
 */
@Timeout(120)
class RealServerIT {
    private val token get() = server!!.token
    private val http = OkHttpClient.Builder().readTimeout(10, TimeUnit.SECONDS).build()
    private var server: RealServer? = null

    @AfterEach
    fun stop() {
        server?.close()
    }

    private fun start(dir: File): String = RealServer(dir).also { server = it }.base

    private fun admin(@Suppress("UNUSED_PARAMETER") base: String, method: String, path: String, body: String? = null) =
        server!!.admin(method, path, body)

    private fun get(c: OkHttpClient, url: String) = c.newCall(Request.Builder().url(url).build()).execute().use { it.body!!.string() }

    @Test
    fun theSdkAgainstTheRealServer(@TempDir dir: File) {
        val base = start(dir)
        assertTrue(admin(base, "PUT", "/admin/v1/nodes/n1", """{"ip":"127.0.0.1","pool":"edge","isp":"telecom","region":"beijing","bandwidth_mbps":1000,"load_pct":20,"latency_ms":15,"enabled":true}""").first in 200..201)
        assertTrue(admin(base, "PUT", "/admin/v1/domains/img.test.example", """{"pool":"edge","ttl":60}""").first in 200..201)
        var aUp = false
        var bUp = true
        Server { MockResponse().setBody("origin") }.use { origin ->
            Server { MockResponse().setResponseCode(if (aUp) 200 else 503).setBody("a") }.use { a ->
                Server { MockResponse().setResponseCode(if (bUp) 200 else 500).setBody("b") }.use { b ->
                    val doc = """{"mergeHostConfigs":[{"host":"img.test.example:${origin.port}","pathPrefix":"/image","rate":1}],""" +
                        """"hostListConfig":[{"host":"127.0.0.1:${a.port}","rate":1},{"host":"127.0.0.1:${b.port}","rate":1}],""" +
                        """"reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":[]}"""
                    val (code, _) = admin(base, "PUT", "/admin/v1/config/cdn", doc)
                    assertTrue(code in 200..201, "config published: $code")
                    val key = Json.parseObject(http.newCall(Request.Builder().url("$base/app/config-center/public-key").build()).execute().use { it.body!!.string() }).str("public_key")!!
                    val bundled = TestKit.doc(0, listOf("bundled.cdn.example"))
                    val local = TestKit.FakeDns(mapOf("gone.test.example" to listOf("127.0.0.9"), "img.test.example" to listOf("127.0.0.1")))
                    val sdk = HttpDns.builder().serviceUrls(listOf(base)).deviceId("android-harness-1").configUrl(base)
                        .configPublicKey(key).defaultConfig(bundled).cacheDir(File(dir, "app")).allowPrivateAddresses(true)
                        .localDns(local).requestSampleRate(1.0).reviveIntervalMs(300).build()
                    sdk.use {
                        TestKit.eventually(10_000) { sdk.configVersion() >= 1 }
                        val client = sdk.install(OkHttpClient.Builder()).eventListenerFactory(sdk.eventListenerFactory()).build()
                        val url = "http://img.test.example:${origin.port}/a.jpg"
                        // a answers 503: next host.
                        assertEquals("b", get(client, url))
                        assertEquals("/image/a.jpg", b.requests.last().path)
                        // The unified hosts are literals here; the original name resolves through the server.
                        val first = sdk.lookup("img.test.example")
                        assertEquals(ResolutionPath.HTTPDNS to listOf("127.0.0.1"), first.path to first.addresses.map { IpFilter.text(it) })
                        assertEquals(ResolutionPath.CACHE, sdk.lookup("img.test.example").path)
                        // Both unified hosts fail: the original URL, resolved by HTTPDNS.
                        bUp = false
                        assertEquals("origin", get(client, url))
                        assertEquals("/a.jpg", origin.requests.last().path)
                        // a comes back: revived by HEAD, traffic moves back.
                        aUp = true
                        TestKit.eventually(10_000) { a.requests.any { it.method == "HEAD" } }
                        TestKit.eventually(10_000) { get(client, "http://img.test.example:${origin.port}/c.jpg") == "a" }
                        // An unmanaged name (upstreams off): the app's own LocalDNS.
                        assertEquals(ResolutionPath.LOCALDNS, sdk.lookup("gone.test.example").path)
                        assertTrue(sdk.flushEvents(), sdk.eventStats().toString() + " " + sdk.eventStats()!!.lastError)
                    }
                    // The wrong carrier: the server's node is labelled telecom, the SIM says unicom.
                    HttpDns.builder().serviceUrls(listOf(base)).allowPrivateAddresses(true).localDns(local)
                        .carrierProvider { "unicom" }.events(false).build().use { s ->
                            val r = s.lookup("img.test.example")
                            assertEquals(ResolutionPath.LOCALDNS, r.path)
                            assertTrue(r.serviceError!!.contains("carrier") || r.serviceError!!.contains("dropped"), r.serviceError)
                        }
                    // The service down: LocalDNS, and sniff mode spares the next lookups.
                    val dead = "http://127.0.0.1:" + ServerSocket(0).use { it.localPort }
                    HttpDns.builder().serviceUrls(listOf(dead)).allowPrivateAddresses(true).localDns(local)
                        .refreshServiceIps(false).events(false).build().use { s ->
                            assertEquals(ResolutionPath.LOCALDNS, s.lookup("img.test.example").path)
                        }
                }
            }
        }
        // The events reached the fleet summary.
        TestKit.eventually(20_000) {
            val (code, summary) = admin(base, "GET", "/admin/v1/events/summary?window=5m")
            code == 200 && listOf("host_switch", "dns_fallback", "host_revive", "request").all { summary.contains("\"event\":\"$it\"") }
        }
        assertFalse(admin(base, "GET", "/admin/v1/events/summary?window=5m").second.contains("android-harness-1"), "no device id")
    }

    /**
     * The push: the SDK holds a long poll (`wait=`) on the real server, which answers it as soon
     * as a new version is published, long before the SDK's (here ten-minute) polling interval.
     */
    @Test
    fun aPublishReachesTheSdkThroughTheLongPoll(@TempDir dir: File) {
        val base = start(dir)
        fun publish(host: String): Int {
            val doc = """{"mergeHostConfigs":[],"hostListConfig":[{"host":"$host","rate":1}],""" +
                """"reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":[]}"""
            val cur = admin(base, "GET", "/admin/v1/config/cdn")
            val req = Request.Builder().url("$base/admin/v1/config/cdn").header("Authorization", "Bearer $token")
                .put(doc.toRequestBody("application/json".toMediaType()))
            if (cur.first == 200) req.header("If-Match", "\"" + Json.parseObject(cur.second).long("configVersion") + "\"")
            return http.newCall(req.build()).execute().use { it.code }
        }
        assertTrue(publish("cdn-a.test.example") in 200..201)
        val key = Json.parseObject(http.newCall(Request.Builder().url("$base/app/config-center/public-key").build()).execute().use { it.body!!.string() }).str("public_key")!!
        HttpDns.builder().serviceUrls(listOf(base)).deviceId("push-1").configUrl(base).configPublicKey(key)
            .allowPrivateAddresses(true).events(false).refreshServiceIps(false).longPollSeconds(30).build().use { sdk ->
                TestKit.eventually(10_000) { sdk.configVersion() == 1L }
                Thread.sleep(500) // the SDK is now holding its long poll
                val t0 = System.nanoTime()
                assertTrue(publish("cdn-b.test.example") in 200..201)
                TestKit.eventually(5_000) { sdk.configVersion() == 2L }
                val ms = (System.nanoTime() - t0) / 1_000_000
                println("long poll: a publish reached the SDK in $ms ms (its polling interval: 10 minutes)")
                assertTrue(ms < 5_000, "pushed, not polled: $ms ms")
            }
    }

    private fun percentile(xs: List<Long>, p: Double): Long = xs.sorted()[Math.min(xs.size - 1, (p * xs.size).toInt())]

    /**
     * Switch-over figures of seed 004's faults, as docs/drill.md defines them (the time a request
     * lost before the attempt that answered), taken from the SDK's own `host_switch` and
     * `dns_fallback` events: 30 fresh SDKs per fault against the real server. Printed, not timed.
     */
    @Test
    fun switchOverFigures(@TempDir dir: File) {
        val base = start(dir)
        assertTrue(admin(base, "PUT", "/admin/v1/nodes/n1", """{"ip":"127.0.0.1","pool":"edge","isp":"telecom","region":"beijing","enabled":true}""").first in 200..201)
        assertTrue(admin(base, "PUT", "/admin/v1/domains/img.test.example", """{"pool":"edge","ttl":60}""").first in 200..201)
        val collector = Server { TestKit.json("{}") }
        val rows = ArrayList<String>()
        collector.use {
            Server { MockResponse().setBody("origin") }.use { origin ->
                Server { MockResponse().setResponseCode(503) }.use { failing ->
                    Server { MockResponse().setBody("ok") }.use { good ->
                        val refusing = ServerSocket(0).use { it.localPort }
                        val key = Json.parseObject(http.newCall(Request.Builder().url("$base/app/config-center/public-key").build()).execute().use { it.body!!.string() }).str("public_key")!!
                        fun publish(first: String) {
                            val doc = """{"mergeHostConfigs":[{"host":"img.test.example:${origin.port}","pathPrefix":"/image","rate":1}],""" +
                                """"hostListConfig":[{"host":"$first","rate":1},{"host":"127.0.0.1:${good.port}","rate":1}],""" +
                                """"reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":[]}"""
                            val cur = admin(base, "GET", "/admin/v1/config/cdn")
                            val req = Request.Builder().url("$base/admin/v1/config/cdn").header("Authorization", "Bearer $token")
                                .put(doc.toRequestBody("application/json".toMediaType()))
                            if (cur.first == 200) req.header("If-Match", "\"" + Json.parseObject(cur.second).long("configVersion") + "\"")
                            http.newCall(req.build()).execute().use { assertTrue(it.code in 200..201, "publish: ${it.code} ${it.body!!.string()}") }
                        }
                        fun measure(fault: String, event: String, field: String, configure: (HttpDns.Builder) -> Unit = {}, run: (HttpDns) -> Unit) {
                            val durations = ArrayList<Long>()
                            repeat(30) { i ->
                                collector.requests.clear()
                                HttpDns.builder().serviceUrls(listOf(base)).deviceId("drill-$i").configUrl(base).configPublicKey(key)
                                    .allowPrivateAddresses(true).localDns(TestKit.FakeDns(mapOf("img.test.example" to listOf("127.0.0.1"))))
                                    .eventsUrl("${collector.url}/app/events").requestSampleRate(0.0).localDnsSampleRate(0.0)
                                    .longPollSeconds(0).refreshServiceIps(false).also(configure).build().use { sdk ->
                                        TestKit.eventually(10_000) { sdk.configVersion() >= 1 }
                                        run(sdk)
                                        assertTrue(sdk.flushEvents())
                                    }
                                val ev = collector.requests.flatMap { Json.parseObject(it.body.readUtf8()).list("events") }
                                    .mapNotNull { Json.asObject(it) }.first { it.str("event") == event }
                                durations.add(ev.long(field)!!)
                            }
                            rows.add("| $fault | `$event` | ${percentile(durations, 0.5)} | ${percentile(durations, 0.9)} | ${durations.maxOrNull()} |")
                        }
                        val url = "http://img.test.example:${origin.port}/a.jpg"
                        fun fetch(sdk: HttpDns) = sdk.install(OkHttpClient.Builder()).build()
                            .newCall(Request.Builder().url(url).build()).execute().use { assertEquals("ok", it.body!!.string()) }
                        publish("127.0.0.1:${failing.port}")
                        measure("CDN host answers 503", "host_switch", "duration_ms") { fetch(it) }
                        publish("127.0.0.1:$refusing")
                        measure("CDN host refuses connections", "host_switch", "duration_ms") { fetch(it) }
                        measure("wrong carrier (SIM unicom, node telecom): LocalDNS", "dns_fallback", "fallback_duration_ms",
                            { it.carrierProvider { "unicom" } }) { sdk -> assertEquals(ResolutionPath.LOCALDNS, sdk.lookup("img.test.example").path) }
                        val dead = "http://127.0.0.1:" + ServerSocket(0).use { it.localPort }
                        measure("HTTPDNS service down: LocalDNS", "dns_fallback", "fallback_duration_ms",
                            { it.serviceUrls(listOf(dead)) }) { sdk -> assertEquals(ResolutionPath.LOCALDNS, sdk.lookup("img.test.example").path) }
                    }
                }
            }
        }
        println("| fault | event | p50 ms | p90 ms | max ms |\n| --- | --- | --- | --- | --- |\n" + rows.joinToString("\n"))
    }

    /**
     * Two more of seed 004's faults against the real server: half the nodes of a pool dead (the
     * SDK hands OkHttp every address; a refused one costs a retry on the next), and a balancer in
     * front of the service that corrupts answers into unroutable addresses (dropped; LocalDNS).
     */
    @Test
    fun halfTheNodesDeadAndCorruptedAnswers(@TempDir dir: File) {
        val base = start(dir)
        // A live node on 127.0.0.12 and a dead one on 127.0.0.11, on the same port.
        val live = okhttp3.mockwebserver.MockWebServer()
        live.dispatcher = object : okhttp3.mockwebserver.Dispatcher() {
            override fun dispatch(request: okhttp3.mockwebserver.RecordedRequest) = MockResponse().setBody("live")
        }
        live.start(java.net.InetAddress.getByName("127.0.0.12"), 0)
        live.use {
            for ((id, ip) in listOf("dead" to "127.0.0.11", "live" to "127.0.0.12")) {
                assertTrue(admin(base, "PUT", "/admin/v1/nodes/$id", """{"ip":"$ip","pool":"half","isp":"telecom","region":"beijing","enabled":true}""").first in 200..201)
            }
            assertTrue(admin(base, "PUT", "/admin/v1/domains/half.test.example", """{"pool":"half","ttl":60,"max_answers":4}""").first in 200..201)
            val local = TestKit.FakeDns(mapOf("half.test.example" to listOf("127.0.0.12")))
            HttpDns.builder().serviceUrls(listOf(base)).allowPrivateAddresses(true).localDns(local).events(false)
                .refreshServiceIps(false).build().use { sdk ->
                    val r = sdk.lookup("half.test.example")
                    assertEquals(ResolutionPath.HTTPDNS, r.path)
                    assertEquals(setOf("127.0.0.11", "127.0.0.12"), r.addresses.map { IpFilter.text(it) }.toSet())
                    val client = sdk.install(OkHttpClient.Builder()).build()
                    repeat(10) { assertEquals("live", get(client, "http://half.test.example:${live.port}/x")) }
                }
            // A corrupting balancer: the real server's answer with its addresses made unroutable.
            Server { r ->
                val real = http.newCall(Request.Builder().url(base + r.path).build()).execute().use { it.body!!.string() }
                TestKit.json(real.replace("127.0.0.11", "0.0.0.0").replace("127.0.0.12", "224.0.0.1"))
            }.use { balancer ->
                HttpDns.builder().serviceUrls(listOf(balancer.url)).allowPrivateAddresses(true).localDns(local).events(false)
                    .refreshServiceIps(false).build().use { sdk ->
                        val r = sdk.lookup("half.test.example")
                        assertEquals(ResolutionPath.LOCALDNS, r.path)
                        assertTrue(r.serviceError!!.contains("dropped"), r.serviceError)
                        assertTrue(balancer.requests.isNotEmpty())
                    }
            }
        }
    }
}
