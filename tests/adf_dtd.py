"""The ADF 1.0 document type (Auto-lead Data Format, version 1.0, May 2000), for validating what
the CRMs receive with a real validating parser (lxml / libxml2).

Written out from the specification's element and attribute tables: ``prospect (id*, requestdate,
vehicle+, customer, vendor, provider?)``, a vehicle's ``year``, ``make`` and ``model`` required,
a contact's ``name+`` and at least one ``email`` or ``phone``, and the enumerated attributes
(``vehicle interest``, ``name part``, ``phone type``...), so a value outside them fails.
"""

from __future__ import annotations

import io

from lxml import etree

ADF_1_0_DTD = """
<!ELEMENT adf (prospect+)>
<!ELEMENT prospect (id*, requestdate, vehicle+, customer, vendor, provider?)>
<!ATTLIST prospect status (new | resend) "new">
<!ELEMENT requestdate (#PCDATA)>

<!ELEMENT vehicle (id*, year, make, model, vin?, stock?, trim?, doors?, bodystyle?, transmission?,
                   odometer?, condition?, colorcombination*, imagetag?, price*, pricecomments?, option*,
                   finance?, comments?)>
<!ATTLIST vehicle interest (buy | lease | sell | trade-in | test-drive) "buy"
                  status (new | used) "new">
<!ELEMENT year (#PCDATA)>
<!ELEMENT make (#PCDATA)>
<!ELEMENT model (#PCDATA)>
<!ELEMENT vin (#PCDATA)>
<!ELEMENT stock (#PCDATA)>
<!ELEMENT trim (#PCDATA)>
<!ELEMENT doors (#PCDATA)>
<!ELEMENT bodystyle (#PCDATA)>
<!ELEMENT transmission (#PCDATA)>
<!ELEMENT odometer (#PCDATA)>
<!ATTLIST odometer status (unknown | rolledover | replaced | original) #IMPLIED
                   units (km | mi) #IMPLIED>
<!ELEMENT condition (#PCDATA)>
<!ELEMENT colorcombination (interiorcolor?, exteriorcolor?, preference?)>
<!ELEMENT interiorcolor (#PCDATA)>
<!ELEMENT exteriorcolor (#PCDATA)>
<!ELEMENT preference (#PCDATA)>
<!ELEMENT imagetag (#PCDATA)>
<!ATTLIST imagetag width CDATA #IMPLIED height CDATA #IMPLIED alttext CDATA #IMPLIED>
<!ELEMENT price (#PCDATA)>
<!ATTLIST price type (quote | offer | msrp | invoice | call | appraisal | asking) "quote"
                currency CDATA #IMPLIED
                delta (absolute | relative | percentage) #IMPLIED
                relativeto (msrp | invoice) #IMPLIED
                source CDATA #IMPLIED>
<!ELEMENT pricecomments (#PCDATA)>
<!ELEMENT option (optionname, manufacturercode?, stock?, weighting?, price?)>
<!ELEMENT optionname (#PCDATA)>
<!ELEMENT manufacturercode (#PCDATA)>
<!ELEMENT weighting (#PCDATA)>
<!ELEMENT finance (method, amount+, balance?)>
<!ELEMENT method (#PCDATA)>
<!ELEMENT amount (#PCDATA)>
<!ATTLIST amount type (downpayment | monthly | total) "total"
                 limit (maximum | minimum | exact) "maximum"
                 currency CDATA #IMPLIED>
<!ELEMENT balance (#PCDATA)>
<!ATTLIST balance type (finance | residual) "finance" currency CDATA #IMPLIED>

<!ELEMENT customer (contact, id*, timeframe?, comments?)>
<!ELEMENT timeframe (description, earliestdate?, latestdate?)>
<!ELEMENT description (#PCDATA)>
<!ELEMENT earliestdate (#PCDATA)>
<!ELEMENT latestdate (#PCDATA)>

<!ELEMENT vendor (id*, vendorname, url?, contact)>
<!ELEMENT vendorname (#PCDATA)>

<!ELEMENT provider (id*, name, service?, url?, email?, phone?, contact?)>
<!ELEMENT service (#PCDATA)>

<!ELEMENT contact (name+, ((email, phone*) | phone+), address?)>
<!ATTLIST contact primarycontact (0 | 1) "0">
<!ELEMENT name (#PCDATA)>
<!ATTLIST name part (surname | first | middle | last | full) #IMPLIED
               type (business | individual) #IMPLIED>
<!ELEMENT email (#PCDATA)>
<!ATTLIST email preferredcontact (0 | 1) #IMPLIED>
<!ELEMENT phone (#PCDATA)>
<!ATTLIST phone type (voice | fax | cellphone | pager) "voice"
                time (morning | afternoon | evening | nopreference | day) "nopreference"
                preferredcontact (0 | 1) #IMPLIED>
<!ELEMENT address (street+, apartment?, city?, regioncode?, postalcode?, country?)>
<!ATTLIST address type (work | home | delivery) #IMPLIED>
<!ELEMENT street (#PCDATA)>
<!ATTLIST street line CDATA #IMPLIED>
<!ELEMENT apartment (#PCDATA)>
<!ELEMENT city (#PCDATA)>
<!ELEMENT regioncode (#PCDATA)>
<!ELEMENT postalcode (#PCDATA)>
<!ELEMENT country (#PCDATA)>

<!ELEMENT id (#PCDATA)>
<!ATTLIST id sequence CDATA #IMPLIED source CDATA #IMPLIED>
<!ELEMENT comments (#PCDATA)>
<!ELEMENT url (#PCDATA)>
"""

_DTD = etree.DTD(io.StringIO(ADF_1_0_DTD))


def adf_problems(text: str) -> list[str]:
    """Every way ``text`` breaks the ADF 1.0 DTD (empty when it is a valid ADF 1.0 document)."""
    root = etree.fromstring(text.encode("utf-8"))
    if _DTD.validate(root):
        return []
    return [f"line {e.line}: {e.message}" for e in _DTD.error_log.filter_from_errors()]


def empty_elements(text: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """Elements without text or children (``allowed``: the tags the DTD requires even when unknown)."""
    root = etree.fromstring(text.encode("utf-8"))
    return [
        root.getroottree().getpath(e)
        for e in root.iter()
        if len(e) == 0 and not (e.text or "").strip() and e.tag not in allowed
    ]
