package io.httpdns.android

import okhttp3.Headers
import okhttp3.MediaType.Companion.toMediaTypeOrNull
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.RequestBody.Companion.toRequestBody
import okhttp3.mockwebserver.Dispatcher
import okhttp3.mockwebserver.MockResponse
import okhttp3.mockwebserver.MockWebServer
import okhttp3.mockwebserver.RecordedRequest
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicInteger

/**
 * Seed 004's per-place fallback with the Kotlin SDK as the app, against the real binary (the
 * drill's `places` scenario, tests/drill/places.rs, with the Rust client): HTTPDNS unreachable
 * for `unicom/shanghai` devices only. A proxy per place stands in front of the service (it adds
 * the place's address as `X-Forwarded-For`, which the server believes from loopback) and can
 * hold the resolution paths past the SDK's timeout while config and events pass. The controller
 * (ticks of 200 ms, steps held 2 s) degrades that place and no other; new devices there then
 * resolve by their `localDns` at once; when the service is back the place ramps up to healthy.
 * Lookup times before and after are printed (not asserted beyond their order of magnitude).
 */
@Timeout(180)
class RealServerPlacesIT {
    private val http = OkHttpClient.Builder().readTimeout(10, TimeUnit.SECONDS).build()

    private class Proxy(private val server: String, private val xff: String, private val http: OkHttpClient) : AutoCloseable {
        /** 0: pass; 1: the resolution paths hang past the SDK's timeout. */
        val mode = AtomicInteger(0)
        private val web = MockWebServer().apply {
            dispatcher = object : Dispatcher() {
                override fun dispatch(request: RecordedRequest): MockResponse = forward(request)
            }
            start()
        }
        val url: String get() = web.url("/").toString().trimEnd('/')

        private fun forward(r: RecordedRequest): MockResponse {
            val path = r.path!!
            if (!path.startsWith("/app/") && mode.get() == 1) {
                Thread.sleep(3000)
                return MockResponse().setResponseCode(504)
            }
            val body = if (r.method == "GET" || r.method == "HEAD") null
                else r.body.readByteArray().toRequestBody(r.getHeader("Content-Type")?.toMediaTypeOrNull())
            val b = Request.Builder().url(server + path).method(r.method!!, body).header("X-Forwarded-For", xff)
            for (h in listOf("If-None-Match", "Content-Encoding")) r.getHeader(h)?.let { b.header(h, it) }
            return http.newCall(b.build()).execute().use { resp ->
                val keep = Headers.Builder()
                for (h in listOf("Content-Type", "ETag", "X-Config-Signature", "X-Config-Version")) resp.header(h)?.let { keep.add(h, it) }
                // Headers first: setBody adds the Content-Length they would otherwise replace.
                MockResponse().setResponseCode(resp.code).setHeaders(keep.build()).setBody(okio.Buffer().write(resp.body!!.bytes()))
            }
        }

        override fun close() = web.shutdown()
    }

    private fun ids(prefix: String, lo: Long, hi: Long, n: Int) =
        generateSequence(0) { it + 1 }.map { "$prefix-$it" }.filter { Buckets.bucket(Buckets.HTTPDNS_RATE_KEY, it) in lo until hi }.take(n).toList()

    private fun state(s: RealServer, isp: String): Pair<String, Double> {
        val (code, body) = s.admin("GET", "/admin/v1/policy/places")
        assertEquals(200, code, body)
        val p = Json.parseObject(body).list("places").mapNotNull { Json.asObject(it) }.firstOrNull { it.str("isp") == isp }
            ?: return "healthy" to 1.0
        return p.str("state")!! to p.double("share")!!
    }

    private fun p90(xs: List<Long>) = xs.sorted()[Math.ceil(xs.size * 0.9).toInt() - 1]

    @Test
    fun aDegradedPlaceResolvesByLocalDnsAtOnceAndRampsBack(@TempDir dir: File) {
        val env = mapOf(
            "HTTPDNS_TRUSTED_PROXIES" to "127.0.0.1/32", "HTTPDNS_CONTROL_TICK_MS" to "200",
            "HTTPDNS_POLICY_STEP_SECONDS" to "2", "HTTPDNS_POLICY_MIN_REQUESTS" to "40",
        )
        RealServer(dir, env, "[events]\nflush_ms = 100\n").use { s ->
            fun put(path: String, body: String) = assertTrue(s.admin("PUT", path, body).first in 200..201, path)
            put("/admin/v1/networks/10.1.0.0%2F16", """{"isp":"unicom","region":"shanghai"}""")
            put("/admin/v1/networks/10.2.0.0%2F16", """{"isp":"telecom","region":"beijing"}""")
            put("/admin/v1/nodes/sh", """{"ip":"127.0.0.1","pool":"edge","isp":"unicom","region":"shanghai","enabled":true}""")
            // Telecom's node for Beijing's devices on 127.0.0.2 (a device drops another carrier's nodes).
            put("/admin/v1/nodes/bj", """{"ip":"127.0.0.2","pool":"edge","isp":"telecom","region":"beijing","enabled":true}""")
            put("/admin/v1/domains/img.test.example", """{"pool":"edge","ttl":60}""")
            put("/admin/v1/config/cdn", """{"mergeHostConfigs":[],"hostListConfig":[{"host":"cdn.test.example","rate":1}],""" +
                """"reviveProbeInterval":600000,"configRequestInterval":600000,"publicIpList":[],""" +
                """"resolutionPolicy":{"default":{"httpdnsRate":1,"timeoutMs":1000}}}""")
            val key = Json.parseObject(http.newCall(Request.Builder().url("${s.base}/app/config-center/public-key").build())
                .execute().use { it.body!!.string() }).str("public_key")!!
            TestKit.Server { MockResponse().setBody("image") }.use { origin ->
                val origin2 = MockWebServer().apply {
                    dispatcher = object : Dispatcher() {
                        override fun dispatch(request: RecordedRequest) = MockResponse().setBody("image")
                    }
                    start(java.net.InetAddress.getByName("127.0.0.2"), origin.port)
                }
                Proxy(s.base, "10.1.0.7", http).use { shanghai ->
                    Proxy(s.base, "10.2.0.7", http).use { beijing ->
                        fun sdk(proxy: Proxy, id: String) = HttpDns.builder().serviceUrls(listOf(proxy.url)).deviceId(id)
                            .configUrl(proxy.url).configPublicKey(key)
                            .localDns(TestKit.FakeDns(mapOf("img.test.example" to listOf(if (proxy === beijing) "127.0.0.2" else "127.0.0.1")))).allowPrivateAddresses(true)
                            .eventsUrl("${proxy.url}/app/events").eventsIntervalMs(200).requestSampleRate(1.0)
                            .localDnsSampleRate(0.0).feedback(false).configIntervalMs(200).longPollSeconds(0)
                            .refreshServiceIps(false).build()
                        fun firstLookup(proxy: Proxy, id: String): Long = sdk(proxy, id).use { d ->
                            TestKit.eventually(10_000) { d.configVersion() >= 1 }
                            val t0 = System.nanoTime()
                            d.lookup("img.test.example")
                            (System.nanoTime() - t0) / 1_000_000
                        }
                        val shIds = ids("sh", 0, 100, 2) + ids("sh", 100, 500, 3) + ids("sh", 500, 2500, 5) + ids("sh", 2500, 10_000, 10)
                        shanghai.mode.set(1)
                        val before = shIds.map { firstLookup(shanghai, it) }

                        // App traffic from every device until the end: an image every 100 ms.
                        val running = AtomicBoolean(true)
                        val threads = (shIds.map { shanghai to it } + ids("bj", 0, 10_000, 10).map { beijing to it }).map { (proxy, id) ->
                            Thread {
                                sdk(proxy, id).use { d ->
                                    val client = d.install(OkHttpClient.Builder()).build()
                                    var i = 0
                                    while (running.get()) {
                                        runCatching {
                                            client.newCall(Request.Builder().url("http://img.test.example:${origin.port}/img/${i++}.jpg").build())
                                                .execute().close()
                                        }
                                        Thread.sleep(100)
                                    }
                                    d.flushEvents()
                                }
                            }.apply { isDaemon = true; start() }
                        }
                        try {
                            TestKit.eventually(30_000) { state(s, "unicom").first == "degraded" }
                            assertEquals("healthy", state(s, "telecom").first, "only the failing place changes")
                            val after = shIds.map { firstLookup(shanghai, "$it-new") }
                            println("unicom/shanghai unreachable, lookup p90: before the controller ${p90(before)} ms " +
                                "(timeout + LocalDNS), degraded ${p90(after)} ms (LocalDNS at once)")
                            assertTrue(p90(after) * 4 < p90(before), "before $before, after $after")

                            // The service is back: the ramp, step by step, to healthy.
                            shanghai.mode.set(0)
                            val seen = mutableListOf("degraded" to 0.01)
                            val end = System.nanoTime() + 90_000_000_000
                            while (seen.last().first != "healthy") {
                                assertTrue(System.nanoTime() < end, "no healthy end: $seen")
                                val now = state(s, "unicom")
                                if (now != seen.last()) seen.add(now)
                                Thread.sleep(50)
                            }
                            assertEquals(listOf("degraded" to 0.01, "recovering" to 0.05, "recovering" to 0.25, "healthy" to 1.0), seen)
                            println("unicom/shanghai recovery: $seen")
                        } finally {
                            running.set(false)
                            threads.forEach { it.join(10_000) }
                            origin2.shutdown()
                        }
                    }
                }
            }
        }
    }
}
