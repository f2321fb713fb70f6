package io.httpdns.android

import io.httpdns.android.TestKit.Server
import io.httpdns.android.TestKit.json
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
import java.net.ServerSocket
import java.util.concurrent.TimeUnit

/** The MergeHostInterceptor against loopback CDN hosts: convergence, failover, revival, body replay. */
@Timeout(60)
class InterceptorTest {
    private val closing = ArrayList<AutoCloseable>()
    private fun <T : AutoCloseable> T.closed(): T = also { closing.add(it) }

    @AfterEach
    fun close() = closing.reversed().forEach { it.close() }

    /** Every name resolves to 127.0.0.1 through the HTTPDNS service. */
    private val service = Server { r ->
        val host = r.requestUrl!!.queryParameter("host") ?: ""
        json(TestKit.answer(host, "127.0.0.1", ttl = 300))
    }.closed()

    private val events = Server { json("{}") }.closed()

    private fun cdn(code: Int = 200) = Server { MockResponse().setResponseCode(code).setBody("from cdn") }.closed()

    private fun deadPort(): Int = ServerSocket(0).use { it.localPort }

    private fun sdk(origin: Int, hosts: List<String>, probePort: Int? = null, publicIps: String = "",
                    configure: (HttpDns.Builder) -> Unit = {}): HttpDns {
        val doc = TestKit.doc(7, hosts, merges = """{"host":"img.test.example:$origin","pathPrefix":"/image","rate":1}""", publicIps = publicIps)
        val b = TestKit.builder(service.url).deviceId("device-0001").defaultConfig(doc)
            .events(true).eventsUrl("${events.url}/app/events").requestSampleRate(1.0).localDnsSampleRate(0.0)
        if (probePort != null) b.networkProbePort(probePort)
        configure(b)
        return b.build().closed()
    }

    private fun client(sdk: HttpDns): OkHttpClient =
        sdk.install(OkHttpClient.Builder()).readTimeout(5, TimeUnit.SECONDS).build()

    private fun get(c: OkHttpClient, url: String) = c.newCall(Request.Builder().url(url).build()).execute().use { it.code to it.body!!.string() }

    private fun sentEvents(sdk: HttpDns): String {
        assertTrue(sdk.flushEvents())
        return events.requests.joinToString("\n") { it.body.readUtf8() }
    }

    @Test
    fun convergesOntoTheFirstHostWithTheSameNameInThePathLeftAlone() {
        val origin = cdn()
        val a = cdn()
        val sdk = sdk(origin.port, listOf("127.0.0.1:${a.port}"))
        val c = client(sdk)
        val (code, body) = get(c, "http://img.test.example:${origin.port}/img.test.example/a.jpg?x=img.test.example")
        assertEquals(200 to "from cdn", code to body)
        assertEquals("/image/img.test.example/a.jpg?x=img.test.example", a.requests.single().path)
        assertEquals(0, origin.requests.size)
        // Not under convergence: untouched, resolved through HTTPDNS.
        assertEquals(200, get(c, "http://other.test.example:${origin.port}/b.jpg").first)
        assertEquals("/b.jpg", origin.requests.single().path)
        val sent = sentEvents(sdk)
        assertTrue(sent.contains("\"event\":\"request\"") && sent.contains("\"convergence\":true"), sent)
        assertFalse(sent.contains("device-0001"), "device ids are never sent")
        // No resolution policy in the document: the server may predate these fields, so they stay out.
        assertFalse(sent.contains("config_version") || sent.contains("httpdns_enabled"), sent)
    }

    @Test
    fun a5xxMovesToTheNextHostAndDisablesTheFirst() {
        val origin = cdn()
        val a = cdn(503)
        val b = cdn()
        val sdk = sdk(origin.port, listOf("127.0.0.1:${a.port}", "127.0.0.1:${b.port}"))
        val c = client(sdk)
        assertEquals(200, get(c, "http://img.test.example:${origin.port}/a.jpg").first)
        assertEquals(1, a.requests.size)
        assertEquals(1, b.requests.size)
        assertEquals(mapOf("127.0.0.1:${a.port}" to true, "127.0.0.1:${b.port}" to false), sdk.hostStates())
        // Disabled: the next request goes straight to b.
        assertEquals(200, get(c, "http://img.test.example:${origin.port}/b.jpg").first)
        assertEquals(1, a.requests.size)
        val sent = sentEvents(sdk)
        assertTrue(sent.contains("\"event\":\"host_switch\"") && sent.contains("\"reason\":\"5xx\"") &&
            sent.contains("\"from\":\"127.0.0.1:${a.port}\""), sent)
    }

    @Test
    fun aRefusedHostIsDisabledOnlyWhileTheNetworkWorks() {
        val origin = cdn()
        val b = cdn()
        val dead = deadPort()
        ServerSocket(0).use { probe ->
            // The network check reaches 127.0.0.1:<probe>: the network works, the host is at fault.
            val sdk = sdk(origin.port, listOf("127.0.0.1:$dead", "127.0.0.1:${b.port}"), probePort = probe.localPort, publicIps = "\"127.0.0.1\"")
            assertEquals(200, get(client(sdk), "http://img.test.example:${origin.port}/a.jpg").first)
            assertEquals(true, sdk.hostStates()["127.0.0.1:$dead"])
            assertTrue(sentEvents(sdk).contains("\"reason\":\"connect_error\""))
        }
        // The check fails (nothing listens on its port): the request still moves on, the host is kept.
        val sdk2 = sdk(origin.port, listOf("127.0.0.1:$dead", "127.0.0.1:${b.port}"), probePort = deadPort(), publicIps = "\"127.0.0.1\"")
        assertEquals(200, get(client(sdk2), "http://img.test.example:${origin.port}/a.jpg").first)
        assertEquals(false, sdk2.hostStates()["127.0.0.1:$dead"])
        assertEquals(2, b.requests.size)
    }

    @Test
    fun everyHostDownMeansTheOriginalUrl() {
        val origin = cdn()
        val a = cdn(500)
        val sdk = sdk(origin.port, listOf("127.0.0.1:${a.port}", "127.0.0.1:${deadPort()}"))
        val (code, body) = get(client(sdk), "http://img.test.example:${origin.port}/a.jpg")
        assertEquals(200 to "from cdn", code to body)
        assertEquals("/a.jpg", origin.requests.single().path, "the URL as the app wrote it")
    }

    @Test
    fun aDisabledHostIsRevivedByHeadOfTheUrlThatFailed() {
        val origin = cdn()
        var up = false
        val a = Server { r -> MockResponse().setResponseCode(if (up) 200 else 503) }.closed()
        val b = cdn()
        val sdk = sdk(origin.port, listOf("127.0.0.1:${a.port}", "127.0.0.1:${b.port}")) { it.reviveIntervalMs(200) }
        val c = client(sdk)
        assertEquals(200, get(c, "http://img.test.example:${origin.port}/a.jpg").first)
        assertEquals(true, sdk.hostStates()["127.0.0.1:${a.port}"])
        up = true
        TestKit.eventually { sdk.hostStates()["127.0.0.1:${a.port}"] == false }
        val probe = a.requests.last()
        assertEquals("HEAD" to "/image/a.jpg", probe.method to probe.path)
        get(c, "http://img.test.example:${origin.port}/c.jpg")
        assertEquals("/image/c.jpg", a.requests.last().path, "traffic moves back to the first host")
        assertTrue(sentEvents(sdk).contains("\"event\":\"host_revive\""))
    }

    @Test
    fun aPostIsNotReplayedOnceItsBodyWentOutUnlessTheAppOptsIn() {
        val origin = cdn()
        val a = cdn(500)
        val b = cdn()
        val hosts = listOf("127.0.0.1:${a.port}", "127.0.0.1:${b.port}")
        val post = Request.Builder().url("http://img.test.example:${origin.port}/up")
            .post("payload".toRequestBody("text/plain".toMediaType())).build()
        client(sdk(origin.port, hosts)).newCall(post).execute().use { assertEquals(500, it.code) }
        assertEquals(0, b.requests.size)
        client(sdk(origin.port, hosts) { it.replayNonIdempotent(true) }).newCall(post).execute().use { assertEquals(200, it.code) }
        assertEquals("payload", b.requests.single().body.readUtf8())
        // A refused connection: the body never went out, so moving on is safe.
        val c = cdn()
        client(sdk(origin.port, listOf("127.0.0.1:${deadPort()}", "127.0.0.1:${c.port}"))).newCall(post).execute().use { assertEquals(200, it.code) }
        assertEquals("payload", c.requests.single().body.readUtf8())
    }

    @Test
    fun installAddsTheInterceptorOnce() {
        val sdk = sdk(deadPort(), listOf("127.0.0.1:${deadPort()}"))
        val b = OkHttpClient.Builder()
        sdk.install(b)
        sdk.install(b)
        assertEquals(1, b.interceptors().count { it === sdk.interceptor() })
    }
}
