package apt
import ("testing";"fmt";"pault.ag/go/debian/dependency")
func TestArchX(t *testing.T){
 d,err:=dependency.Parse("a:any, b:native (>= 1) [amd64], c [!amd64], d [linux-any], e:i386, f:amd64, ${x}")
 fmt.Println(err)
 for _,r:=range d.Relations{for _,p:=range r.Possibilities{fmt.Printf("%s %+v %+v %+v\n",p.Name,p.Arch,p.Architectures,p.Version)}}
 tgt,_:=dependency.ParseArch("amd64")
 for _,r:=range d.Relations{for _,p:=range r.Possibilities{if p.Architectures!=nil{fmt.Println(p.Name,p.Architectures.Matches(tgt))}}}
}
