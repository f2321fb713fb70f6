package io.httpdns.android

import io.httpdns.android.TestKit.Server
import io.httpdns.android.TestKit.answer
import io.httpdns.android.TestKit.json
import okhttp3.mockwebserver.MockResponse
import okhttp3.mockwebserver.SocketPolicy
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.net.UnknownHostException
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit

@Timeout(30)
class ResolverTest {
    private val labelled = answer("a.example.com", "2.2.2.1", "1.1.1.1", "0.0.0.0", ttl = 120,
        extra = ""","client_isp":"unicom","ip_isp":{"2.2.2.1":"unicom","1.1.1.1":"telecom"}""")

    @Test
    fun failsOverBetweenAddressesFiltersAndCachesPerNetwork() {
        Server { json(labelled) }.use { good ->
            Server { MockResponse().setResponseCode(503) }.use { bad ->
                val net = NetworkMonitor.Fixed("wifi:home")
                TestKit.builder("http://127.0.0.1:1", bad.url, good.url).allowPrivateAddresses(false).networkMonitor(net).build().use { sdk ->
                    val a = sdk.lookup("A.example.com.")
                    assertEquals(ResolutionPath.HTTPDNS, a.path)
                    // The unroutable address and the other carrier's node are gone.
                    assertEquals(listOf("2.2.2.1"), a.addresses.map { IpFilter.text(it) })
                    assertEquals(2, a.dropped.size)
                    assertEquals(120_000, a.ttlMs)
                    assertEquals(ResolutionPath.CACHE, sdk.lookup("a.example.com").path)
                    assertEquals(1, good.paths("/resolve").size, good.requests.map { it.path }.toString())
                    // Another network: asked again, and the address that answered is tried first.
                    net.change("cellular")
                    TestKit.eventually { sdk.lookup("a.example.com").path == ResolutionPath.CACHE }
                    assertEquals(1, bad.requests.size)
                    val r = good.paths("/resolve").first()
                    assertEquals("a.example.com", r.requestUrl!!.queryParameter("host"))
                    assertEquals("4", r.requestUrl!!.queryParameter("query"), "IPv4-only stack: no AAAA asked")
                    assertEquals("1", r.requestUrl!!.queryParameter("labels"))
                }
            }
        }
    }

    @Test
    fun theSimCarrierWinsOverTheServersView() {
        Server { json(labelled) }.use { s ->
            TestKit.builder(s.url).allowPrivateAddresses(false).carrierProvider { "telecom" }.build().use { sdk ->
                assertEquals(listOf("1.1.1.1"), sdk.lookup("a.example.com").addresses.map { IpFilter.text(it) })
            }
        }
    }

    @Test
    fun fallsBackToLocalDnsThenToStaleAndSniffs() {
        Server { MockResponse().setResponseCode(503) }.use { bad ->
            val local = TestKit.FakeDns(mapOf("a.example.com" to listOf("127.0.0.9")))
            val clock = TestKit.FakeClock()
            TestKit.builder(bad.url).localDns(local).clock(clock).build().use { sdk ->
                val a = sdk.lookup("a.example.com")
                assertEquals(ResolutionPath.LOCALDNS, a.path)
                assertTrue(a.serviceError!!.contains("503"), a.serviceError)
                assertEquals(30_000, a.ttlMs)
                // Sniff mode: the next miss does not ask the service again within 30 s.
                val before = bad.requests.size
                assertEquals(ResolutionPath.CACHE, sdk.lookup("a.example.com").path, "LocalDNS answers are cached for 30 s")
                assertThrows<UnknownHostException> { sdk.lookup("none.example.com") }
                assertEquals(before, bad.requests.size, "sniff mode: no request to a failing service")
                clock.advance(30_001)
                assertThrows<UnknownHostException> { sdk.lookup("none.example.com") }
                assertEquals(before + 1, bad.requests.size, "one sniff after the interval")
            }
        }
    }

    @Test
    fun staleIsTheLastResortAndReusedWhileRefreshing() {
        var up = true
        Server { if (up) json(answer("s.example.com", "127.0.0.5", ttl = 60)) else MockResponse().setResponseCode(500) }.use { s ->
            val clock = TestKit.FakeClock()
            TestKit.builder(s.url).clock(clock).reuseExpired(false).build().use { sdk ->
                assertEquals(ResolutionPath.HTTPDNS, sdk.lookup("s.example.com").path)
                up = false
                clock.advance(3_600_000)
                val a = sdk.lookup("s.example.com")
                assertEquals(ResolutionPath.STALE, a.path, "expired answer beats no answer")
                assertEquals(listOf("127.0.0.5"), a.addresses.map { IpFilter.text(it) })
            }
            up = true
            TestKit.builder(s.url).clock(clock).build().use { sdk ->
                sdk.lookup("s.example.com")
                val n = s.requests.size
                clock.advance(46_000) // past 75% of 60 s: answered from the cache, refreshed behind
                assertEquals(ResolutionPath.CACHE, sdk.lookup("s.example.com").path)
                TestKit.eventually { s.requests.size == n + 1 }
                clock.advance(120_000)
                assertEquals(ResolutionPath.STALE, sdk.lookup("s.example.com").path, "optimistic: expired reused while refreshing")
            }
        }
    }

    @Test
    fun aNameFailureIsARefusalNotSniffMode() {
        Server { json("""{"code":"InternalError","error":"upstream DNS resolution failed"}""", 502) }.use { s ->
            TestKit.builder(s.url).build().use { sdk ->
                assertThrows<UnknownHostException> { sdk.lookup("broken.example.com") }
                assertThrows<UnknownHostException> { sdk.lookup("other.example.com") }
                assertEquals(2, s.requests.size, "not sniffing: the next name is asked")
            }
        }
    }

    @Test
    fun concurrentMissesMakeOneRequest() {
        Server { json(answer("c.example.com", "127.0.0.7")).setBodyDelay(200, TimeUnit.MILLISECONDS) }.use { s ->
            TestKit.builder(s.url).build().use { sdk ->
                val pool = Executors.newFixedThreadPool(16)
                val all = (1..32).map { pool.submit<Resolution> { sdk.lookup("c.example.com") } }
                all.forEach { assertEquals(1, it.get(10, TimeUnit.SECONDS).addresses.size) }
                pool.shutdown()
                assertEquals(1, s.requests.size)
            }
        }
    }

    @Test
    fun preResolvesInBatchesAndHonoursAllowAndDenyLists() {
        Server { r ->
            val hosts = r.requestUrl!!.queryParameter("host")!!.split(',')
            json("""{"dns":[${hosts.joinToString(",") { """{"host":"$it","type":1,"ips":["127.0.0.8"],"ttl":300}""" }}]}""")
        }.use { s ->
            val local = TestKit.FakeDns(mapOf("private.example.com" to listOf("127.0.0.2")))
            TestKit.builder(s.url).localDns(local)
                .preResolveHosts(listOf("a.example.com", "b.example.com", "c.example.com", "private.example.com"))
                .denyHosts(listOf("*.internal.example.com", "private.example.com")).build().use { sdk ->
                // Until the batch's answers are stored, not only asked for: a lookup before that
                // joins the request in flight (path `httpdns`).
                TestKit.eventually { sdk.resolver.cache.names(sdk.resolver.networkKey(), 10).size == 3 }
                assertEquals(1, s.requests.size)
                assertEquals("a.example.com,b.example.com,c.example.com", s.requests[0].requestUrl!!.queryParameter("host"))
                for (h in listOf("a.example.com", "b.example.com", "c.example.com")) assertEquals(ResolutionPath.CACHE, sdk.lookup(h).path)
                assertEquals(ResolutionPath.LOCALDNS, sdk.lookup("private.example.com").path)
                assertEquals(1, s.requests.size, "denied names never reach the service")
            }
            TestKit.builder(s.url).localDns(TestKit.FakeDns(mapOf("x.other.com" to listOf("127.0.0.3"))))
                .allowHosts(listOf("*.example.com")).build().use { sdk ->
                assertEquals(ResolutionPath.LOCALDNS, sdk.lookup("x.other.com").path)
                assertEquals(ResolutionPath.HTTPDNS, sdk.lookup("y.example.com").path)
            }
        }
    }

    @Test
    fun signedRequestsWithAnAccount() {
        Server { json(answer("a.example.com", "127.0.0.1")) }.use { s ->
            TestKit.builder(s.url).account("100000", "s3cr3t").build().use { sdk ->
                sdk.lookup("a.example.com")
                val u = s.requests[0].requestUrl!!
                assertEquals("/100000/sign_resolve", u.encodedPath)
                val t = u.queryParameter("t")!!.toLong()
                assertTrue(t > System.currentTimeMillis() / 1000 + 500)
                assertEquals(Signing.signResolve("a.example.com", "s3cr3t", t), u.queryParameter("s"))
            }
        }
    }

    @Test
    fun v2WithAesGcmAndHmac() {
        val secret = "0123456789ABCDEF0123456789ABCDEF"
        val aes = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        Server { r ->
            val u = r.requestUrl!!
            val params = u.queryParameterNames.map { it to u.queryParameter(it)!! }
            val ok = Signing.v2Signature(secret, Signing.v2Canonical(params)) == u.queryParameter("s")
            val plain = String(V2Cipher.open(2, V2Cipher.key(aes)!!, Codec.unhex(u.queryParameter("enc")!!)!!))
            val asked = Json.parseObject(plain)
            val data = """{"cip":"1.0.2.7","answers":[{"dn":"${asked.str("dn")}","v4":{"ips":["127.0.0.4"],"ttl":90}}]}"""
            val nonce = ByteArray(12) { it.toByte() }
            val sealed = Codec.base64(V2Cipher.seal(2, V2Cipher.key(aes)!!, nonce, data.toByteArray()))
            if (!ok || u.queryParameter("m") != "2") json("""{"code":"InvalidSignature"}""", 403)
            else json("""{"code":"success","mode":2,"data":"$sealed"}""")
        }.use { s ->
            TestKit.builder(s.url).account("100000", secret).aesKey(aes).build().use { sdk ->
                val a = sdk.lookup("v2.example.com")
                assertEquals(ResolutionPath.HTTPDNS, a.path)
                assertEquals(listOf("127.0.0.4"), a.addresses.map { IpFilter.text(it) })
                assertEquals(90_000, a.ttlMs)
                assertEquals("/v2/d", s.requests[0].requestUrl!!.encodedPath)
                assertEquals(null, s.requests[0].requestUrl!!.queryParameter("dn"), "the name travels encrypted")
            }
        }
    }

    @Test
    fun persistentCacheSurvivesARestart(@TempDir dir: File) {
        Server { json(answer("p.example.com", "127.0.0.6", ttl = 600)) }.use { s ->
            TestKit.builder(s.url).cacheDir(dir).build().use { sdk ->
                sdk.lookup("p.example.com")
                TestKit.eventually { File(dir, "httpdns-cache.json").isFile }
            }
            TestKit.builder(s.url).cacheDir(dir).build().use { sdk ->
                assertEquals(ResolutionPath.CACHE, sdk.lookup("p.example.com").path)
                assertEquals(1, s.requests.size)
            }
            File(dir, "httpdns-cache.json").writeText("{not json")
            TestKit.builder(s.url).cacheDir(dir).build().use { sdk -> assertEquals(ResolutionPath.HTTPDNS, sdk.lookup("p.example.com").path) }
        }
    }

    @Test
    fun serviceIpsComeFromSsAndReplaceTheBootstrapOrder() {
        Server { r -> json(answer("a.example.com", "127.0.0.1")) }.use { real ->
            Server { r ->
                if (r.path!!.startsWith("/ss")) json("""{"service_ip":["127.0.0.1"],"service_ipv6":[],"service_ip_port":[${real.port}],"service_ipv6_port":[]}""")
                else MockResponse().setResponseCode(503)
            }.use { boot ->
                TestKit.builder(boot.url).refreshServiceIps(true).build().use { sdk ->
                    TestKit.eventually { boot.paths("/ss").isNotEmpty() && sdk.service.servers().size == 2 }
                    assertEquals(ResolutionPath.HTTPDNS, sdk.lookup("a.example.com").path)
                    assertEquals(1, real.requests.size)
                    assertEquals(0, boot.paths("/resolve").size, "the /ss address is tried first")
                }
            }
        }
    }

    @Test
    fun aClosedSdkFallsBackToLocalDns() {
        val local = TestKit.FakeDns(mapOf("a.example.com" to listOf("127.0.0.9")))
        val sdk = TestKit.builder("http://127.0.0.1:1").localDns(local).build()
        sdk.close()
        sdk.close()
        assertEquals(ResolutionPath.LOCALDNS, sdk.lookup("a.example.com").path)
    }

    @Test
    fun literalsBypassAndBadNamesFail() {
        TestKit.builder("http://127.0.0.1:1").build().use { sdk ->
            assertEquals(ResolutionPath.LITERAL, sdk.lookup("127.0.0.1").path)
            assertEquals(ResolutionPath.LITERAL, sdk.lookup("[::1]").path)
            assertThrows<UnknownHostException> { sdk.lookup("a..b") }
        }
    }

    @Test
    fun aTimeoutMovesOnAndIsReportedAsSuch() {
        Server { MockResponse().setSocketPolicy(SocketPolicy.NO_RESPONSE) }.use { silent ->
            val local = TestKit.FakeDns(mapOf("t.example.com" to listOf("127.0.0.9")))
            TestKit.builder(silent.url).timeoutMs(300).localDns(local).build().use { sdk ->
                val started = System.nanoTime()
                val a = sdk.lookup("t.example.com")
                assertEquals(ResolutionPath.LOCALDNS, a.path)
                assertNotNull(a.serviceError)
                assertTrue((System.nanoTime() - started) / 1_000_000 < 3000)
            }
        }
    }
}
