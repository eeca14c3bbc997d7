// status.js: LuCI status tab of mtproxy: service state, the links with QR codes, the metrics endpoint's counters.
'use strict';
'require view';
'require rpc';
'require uci';
'require poll';
'require dom';
'require uqr';

var callServiceList = rpc.declare({
	object: 'service',
	method: 'list',
	params: [ 'name' ],
	expect: { '': {} }
});

// rpcd plugin /usr/libexec/rpcd/luci.mtproxy: reads the links file as root (it is 0600).
var callStatus = rpc.declare({
	object: 'luci.mtproxy',
	method: 'status',
	expect: { '': {} }
});

var callStats = rpc.declare({
	object: 'luci.mtproxy',
	method: 'stats',
	expect: { '': {} }
});

function running(list) {
	var instances = (list && list.mtproxy && list.mtproxy.instances) || {};
	return Object.keys(instances).some(function(k) { return instances[k].running; });
}

function linkRow(link) {
	var qr = E('div', { 'style': 'width:12em' });
	try {
		qr.innerHTML = uqr.renderSVG(link.url, { pixelSize: 3, ecc: 'M' });
	}
	catch (e) {
		qr.textContent = _('(no QR code: %s)').format(e.message);
	}
	return E('tr', { 'class': 'tr' }, [
		E('td', { 'class': 'td' }, link.name),
		E('td', { 'class': 'td', 'style': 'word-break:break-all' },
			E('a', { 'href': link.url }, link.url)),
		E('td', { 'class': 'td' }, qr)
	]);
}

// The /stats JSON as rows: numbers at any depth, named by their path (a.b.c).
function flatten(prefix, obj, out) {
	Object.keys(obj).sort().forEach(function(k) {
		var v = obj[k], name = prefix ? prefix + '.' + k : k;
		if (v != null && typeof v == 'object')
			flatten(name, v, out);
		else
			out.push([ name, String(v) ]);
	});
	return out;
}

function statsTable(stats) {
	if (!stats || stats.error)
		return E('p', {}, stats && stats.error ? stats.error : _('No counters.'));
	return E('table', { 'class': 'table' }, flatten('', stats, []).map(function(r) {
		return E('tr', { 'class': 'tr' }, [
			E('td', { 'class': 'td left' }, r[0]),
			E('td', { 'class': 'td left' }, r[1])
		]);
	}));
}

return view.extend({
	load: function() {
		return Promise.all([
			callServiceList('mtproxy').catch(function() { return {}; }),
			callStatus().catch(function() { return {}; }),
			uci.load('mtproxy')
		]);
	},

	render: function(data) {
		var up = running(data[0]), st = data[1] || {};
		var enabled = uci.get('mtproxy', 'main', 'enabled') == '1';
		var metrics = uci.get('mtproxy', 'main', 'metrics');
		var links = st.links || [];

		var state = E('p', {}, up ? _('mtproxy is running.') :
			(enabled ? _('mtproxy is enabled but not running: see the system log (logread -e mtproxy).') :
				_('mtproxy is disabled: enable it on the Settings tab.')));

		var linkBox = links.length ?
			E('table', { 'class': 'table' }, [
				E('tr', { 'class': 'tr table-titles' }, [
					E('th', { 'class': 'th' }, _('User')),
					E('th', { 'class': 'th' }, _('Link')),
					E('th', { 'class': 'th' }, _('QR code'))
				])
			].concat(links.map(linkRow))) :
			E('p', {}, _('No links yet in %s: they appear once mtproxy has started.').format(st.links_file || '?'));

		var statsBox = E('div', {}, metrics ? E('em', {}, _('Loading...')) :
			E('p', {}, _('Set the metrics endpoint on the Settings tab (e.g. 127.0.0.1:9100) to see the counters here.')));
		if (metrics) {
			var refresh = function() {
				return callStats().then(function(s) { dom.content(statsBox, statsTable(s)); });
			};
			refresh();
			poll.add(refresh, 10);
		}

		return E('div', {}, [
			E('h2', {}, _('MTProto proxy')),
			E('div', { 'class': 'cbi-section' }, [ E('h3', {}, _('Service')), state ]),
			E('div', { 'class': 'cbi-section' }, [
				E('h3', {}, _('Links')),
				E('p', {}, _('Give each user their link (it carries the secret). The links use the public host and port of the Settings tab.')),
				linkBox
			]),
			E('div', { 'class': 'cbi-section' }, [
				E('h3', {}, metrics ? _('Counters (%s/stats)').format(metrics) : _('Counters')),
				statsBox
			])
		]);
	},

	handleSave: null,
	handleSaveApply: null,
	handleReset: null
});
